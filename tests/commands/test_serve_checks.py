"""`rollout serve` refuses a bad port, a taken port, a missing model or TLS file in one line, exit 2,
before the model loads."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from rollout import engine_factory
from rollout.cli import main


@pytest.fixture
def no_model_load(monkeypatch) -> None:
    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("the model loaded before the check")

    monkeypatch.setattr(engine_factory, "load_engine", refuse)


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_port_out_of_range_is_a_usage_error(capsys, no_model_load) -> None:
    """It served on a random port."""
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--port", "99999"])
    assert exit_.value.code == 2
    assert "argument --port: 99999 is not a port (0-65535" in capsys.readouterr().err


def test_a_port_in_use_is_refused_before_the_model_loads(capsys, no_model_load) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 2
    line = one_line_error(capsys)
    assert f"--port {port}: already in use on 127.0.0.1" in line and "pick another port" in line


def test_a_metrics_port_in_use_is_refused_before_the_model_loads(capsys, no_model_load) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--port", "0", "--metrics-port", str(port)]) == 2
    assert f"--metrics-port {port}: already in use" in one_line_error(capsys)


def test_a_missing_model_directory_is_named(tmp_path: Path, capsys, no_model_load) -> None:
    """It ended in the Hub's "Repo id must be in the form ..."."""
    missing = tmp_path / "no_such_model"
    assert main(["serve", "--port", "0", "--model", str(missing)]) == 2
    assert f"--model {missing}: no such directory" in one_line_error(capsys)


def test_an_uncached_hub_id_offline_is_refused_before_the_model_loads(capsys, no_model_load) -> None:
    """HF_HUB_OFFLINE is set in the tests (conftest.py): an id the cache lacks cannot load, so say it now."""
    assert main(["serve", "--port", "0", "--model", "no-such-org/no-such-model"]) == 2
    line = one_line_error(capsys)
    assert "--model no-such-org/no-such-model: not in the Hugging Face cache" in line
    assert "HF_HUB_OFFLINE is set" in line


def test_a_missing_tls_file_is_named(tmp_path: Path, capsys, no_model_load) -> None:
    key = tmp_path / "key.pem"
    key.write_text("")
    assert (
        main(["serve", "--port", "0", "--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(key)]) == 2
    )
    assert f"--tls-cert {tmp_path / 'cert.pem'}: no such file" in one_line_error(capsys)


def test_a_certificate_that_does_not_load_is_refused_before_the_model_loads(
    tmp_path: Path, capsys, no_model_load
) -> None:
    """gRPC and HTTPS share the pair: one clear line now, not a failed start after loading."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("not a certificate")
    key.write_text("not a key")
    assert main(["serve", "--port", "0", "--tls-cert", str(cert), "--tls-key", str(key)]) == 2
    assert f"--tls-cert {cert} --tls-key {key}: not a PEM certificate chain" in one_line_error(capsys)


def test_served_model_name_without_the_openai_port_is_refused(capsys, no_model_load) -> None:
    """It would name nothing: gRPC keeps the engine's name."""
    assert main(["serve", "--port", "0", "--served-model-name", "policy"]) == 2
    assert "--served-model-name names the model on the OpenAI API; it needs --openai-port" in one_line_error(
        capsys
    )
