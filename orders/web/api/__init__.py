"""The HTTP API under ``/api/v1``, served by ``orders web`` beside the dashboard.

``schemas`` (the pydantic models the OpenAPI document is generated from),
``problems`` (every 4xx and 5xx as an RFC 9457 problem), ``auth`` (bearer tokens,
roles, per-token rate limits), ``routes`` (orders, jobs, bulk actions, audit) and
``app`` (the FastAPI application the dashboard is mounted in). Reasoning:
docs/adr/0039-the-front-door-tokens-and-idempotency.md.
"""
