"""The wire protocol shared by client, server and weight pusher: generated stubs, conversions, prompt rendering."""
