"""The SQL database (SQLite or PostgreSQL through SQLAlchemy): the documents and chunks repository, the analysis and
embedding caches, the invocation, session and audit records, the tables and their Alembic migrations."""
