"""Reads: stored rows turned into views (``convert``) and the reads and
newest-first pages of the API (``queries``)."""
