"""The in-memory retrieval engine: the indexes of one knowledge base (lexical copies, the L0 keyword index,
the vector lane and its background worker), the locks that keep lookups and refreshes apart, recall over the
lanes, and section lookups. It reads documents through the repository and knows nothing of answers or edges."""
