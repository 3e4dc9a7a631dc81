"""A small shop: orders over HTTP, receipts and card charges as background jobs."""
