"""The web report under /ui: server-rendered pages over the same queries as the JSON API."""
