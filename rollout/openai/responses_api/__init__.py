"""The Responses API (`POST /v1/responses`, `GET /v1/responses/{id}`), on the chat path: a request becomes a
chat request (to_chat.py; input items, tools and tool_choice in input_items.py), is prepared and sampled as
chat is, and its chat choice is written as a Response (response_object.py) or as Responses stream events
(response_events.py); stored responses for `previous_response_id` live in response_store.py. The routes
are the HTTP service's, at the package top (rollout/openai/responses_routes.py)."""
