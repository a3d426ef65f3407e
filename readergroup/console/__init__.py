"""The web console: ``readergroup console`` (``pip install 'readergroup[console]'``).

An overview of scopes, streams and reader groups; each stream's segment graph over its scalings;
each group's ownership, lag over the last 15 minutes, checkpoints and membership history; live
through server-sent events. Read-only unless started with ``--allow-actions``. Everything it
shows comes through the admin APIs; its page, scripts and styles are served from the package
(no CDN: it works offline). A Grafana dashboard for ``readergroup metrics serve`` ships in
``readergroup/console/grafana/readergroup.json``.
"""
