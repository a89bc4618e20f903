"""Evaluation: datasets and golden-case files, the runner and its metrics, replay of recorded lane candidates,
live runs against a server, paired comparison, reports with charts, and the regression gate."""
