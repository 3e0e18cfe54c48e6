"""The report pages under /reports/: selectors read, tables and charts lay out, views serve."""
