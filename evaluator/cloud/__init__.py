"""Ranking runs on cloud GPUs (Modal): the same runner as a local run, one container per job.

Only :mod:`evaluator.cloud.modal_app` imports ``modal``; everything else here runs without it, so
``qrbench modal rank --local`` and ``--dry-run`` need neither the package nor credentials.
"""
