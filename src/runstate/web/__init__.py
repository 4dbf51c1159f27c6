"""The web pages served next to the API."""
