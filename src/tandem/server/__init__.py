"""The HTTP service: engine (no HTTP) and FastAPI app."""
