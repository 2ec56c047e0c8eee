"""FastAPI application, routers, schemas and auth."""
