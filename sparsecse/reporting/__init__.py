"""Reporting: tables, paired comparisons and figures rebuilt from a finished sweep directory."""
