"""Operator tools: the ``docqa`` command line, ``docqa tune`` and the traffic replay it measures with."""
