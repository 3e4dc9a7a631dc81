"""Bundled Alembic environment: runs the queue's revisions on the connection it is handed."""

from alembic import context

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "the sqla_queue migration environment runs on a connection: use "
        "sqla_queue.migrations.upgrade(connection) or `sqla-queue db upgrade`"
    )

context.configure(connection=connection, target_metadata=None, transaction_per_migration=True)
with context.begin_transaction():
    context.run_migrations()
