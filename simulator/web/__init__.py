"""``clustersim serve``: a what-if page in the browser over the simulator (issue 34).

:mod:`.inputs` turns a request into a configuration (shipped names or YAML text only),
:mod:`.compute` and :mod:`.jobs` are what worker processes run, :mod:`.pool` and
:mod:`.manager` bound them in time and number, :mod:`.app` is the Starlette application
and ``static/`` the page (plain HTML, CSS and JavaScript; no build step, no CDN).
Only :mod:`.app` needs the ``web`` extra (``pip install "clustersim[web]"``).
See docs/web.md.
"""
