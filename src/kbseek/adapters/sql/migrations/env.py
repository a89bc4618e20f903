"""Alembic environment: runs on the connection kbseek hands over (see ``adapters/sql/migrate.py``)."""

from alembic import context

from kbseek.adapters.sql.tables import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
