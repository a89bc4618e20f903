"""Operations signals: structured logs with request ids, Prometheus metrics, the bounded trace summary a verifier
reads, and redaction of credentials from anything shown."""
