"""Maintenance of a data home: doctor (check and repair), reindex, backup and restore, schema upgrades, and reading
the records without opening a knowledge base."""
