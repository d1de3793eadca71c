"""The ``orders`` command: one Typer app (``main``) composed of small command modules.

Each module holds one command or command group and stays thin: it parses its
arguments and calls the package that does the work, importing that package's
heavier parts inside the command so that ``--help`` stays fast. It may import
every other package of orders (``orders.domain``, ``orders.sources``,
``orders.app``, ``orders.worker``, ``orders.observability``, ``orders.web``,
``orders.demo``, ``orders.chaos``); nothing in orders imports it.
"""
