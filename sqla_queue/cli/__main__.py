"""``python -m sqla_queue.cli`` is the same as the ``sqla-queue`` console script."""

from . import run

run()
