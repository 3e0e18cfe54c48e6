from __future__ import annotations

from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from ledger.reports import errors
from marina.api import api
from observability.views import metrics_view
from passthru.api import unknown_path

# The admin is Marina's, not "Django administration" (templates/admin/base_site.html).
admin.site.site_header = "Marina administration"
admin.site.site_title = "Marina admin"
admin.site.index_title = "Ledger, keys and crews"

urlpatterns = [
    # A person opening the server's address lands on the first report page they may open (or the login page).
    path("", errors.home, name="home"),
    path("admin/", admin.site.urls),
    path("reports/", include("ledger.reports.urls")),
    # Browsers ask for /favicon.ico on every admin page; answer instead of logging a 404.
    path("favicon.ico", RedirectView.as_view(url=static("ledger/favicon.svg"), permanent=True)),
    path("metrics", metrics_view, name="metrics"),
    path("", api.urls),
    re_path(r"^v1/(?P<rest>.*)$", unknown_path),
]

# Errors in the reports' layout, naming the permission a page needs (ledger/reports/errors.py).
handler403 = errors.forbidden
handler404 = errors.not_found
