"""A small asyncio shop: orders over HTTP with FastAPI, receipts as async background jobs."""
