"""Query and Mutation resolvers: a few lines each, calling services and answering
their refusals with ``Problem`` members."""
