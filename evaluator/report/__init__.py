"""Rendering results for people: terminal tables, Markdown reports, plots.

Renderers take results and return text or paths; measurement never imports this package.
"""
