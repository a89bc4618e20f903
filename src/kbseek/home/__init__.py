"""The data home on disk: planning an ingest of files and folders, one owner per home, writes of one path taking
turns, and opening a home read-only beside its owner."""
