"""Chunk alignment (hybrid prefix caching): prefill chunks end on the block boundaries snapshots need."""

from rollout.engine.hybrid.chunk_alignment import aligned_chunk


def test_a_prompt_that_fits_stops_at_its_last_hittable_boundary_then_computes_its_tail() -> None:
    assert aligned_chunk(0, 23, 23, 4) == 20  # a repeat of these 23 tokens hits 20 of them
    assert aligned_chunk(20, 3, 23, 4) == 3
    assert aligned_chunk(0, 24, 24, 4) == 20  # a block-multiple prompt too: a hit leaves one token


def test_a_chunk_cut_by_the_budget_ends_on_the_last_boundary_inside_it() -> None:
    assert aligned_chunk(0, 10, 40, 4) == 8
    assert aligned_chunk(8, 10, 40, 4) == 8


def test_a_chunk_with_no_boundary_inside_is_left_as_it_is() -> None:
    assert aligned_chunk(5, 2, 40, 4) == 2  # nothing to end on: not starved
    assert aligned_chunk(21, 1, 22, 4) == 1  # a decode
