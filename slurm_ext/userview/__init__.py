"""The read-only user view: rows and reasons, the HTTP answers, the HTML page."""
