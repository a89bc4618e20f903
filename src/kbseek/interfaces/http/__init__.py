"""The REST API, its guards (keys, origins, hosts, body size), error mapping, offline API docs and the web
console's routes, all over one ``KnowledgeBase``."""
