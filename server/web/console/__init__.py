"""The web console served by tikk itself (``tikk server --http``): ``routes`` over
``server.ops``, ``pages`` (HTML), ``sessions`` (logins, CSRF), ``stats`` (the overview's
figures)."""
