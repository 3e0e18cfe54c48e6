"""The report pages, mounted at /reports/ by marina/urls.py."""
from __future__ import annotations

from django.urls import path

from ledger.reports import insight_views, views

app_name = "reports"

urlpatterns = [
    path("", views.index, name="index"),
    path("runs/", views.run_list, name="runs"),
    path("runs/<int:pk>/", views.run_detail, name="run"),
    path("compare/", views.compare, name="compare"),
    path("experiments/", views.experiment_list, name="experiments"),
    path("experiments/<int:pk>/", views.experiment_detail, name="experiment"),
    path("spend/", views.spend, name="spend"),
    path("spend.csv", views.spend_csv, name="spend_csv"),
    path("traces/", views.trace_list, name="traces"),
    path("traces/<int:pk>/", views.trace_detail, name="trace"),
    path("frontier/", insight_views.frontier, name="frontier"),
    path("trajectories/", insight_views.trajectories, name="trajectories"),
]
