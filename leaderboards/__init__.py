"""Leaderboards: every TurnRL env scored with the metrics its paper reports, next to the paper's numbers.

* :mod:`leaderboards.evaluate`: the CLI (``python -m leaderboards.evaluate --env ID --model SPEC``).
* :mod:`leaderboards.families`: the metric registry, one :class:`~leaderboards.families.Family` per env family.
* :mod:`leaderboards.reported`: the seed papers' reported numbers (reference rows).
* :mod:`leaderboards.tables`: result rows -> ``README.md`` tables and ``plots/*.png``.
* :mod:`leaderboards.experiments`: the CLI of experiment grids (``python -m leaderboards.experiments
  run|status|aggregate SPEC``): :mod:`leaderboards.spec` (experiment specs as data), :mod:`leaderboards.runner` (the
  grid runner that trains them through the ``trainers`` CLIs) and :mod:`leaderboards.report` (their aggregation
  into ``experiments/<name>/`` curves and tables).
"""
