from __future__ import annotations

import logging

from django.apps import AppConfig

log = logging.getLogger(__name__)


class ObservabilityConfig(AppConfig):
    name = "observability"
    verbose_name = "Metrics and trace export"

    def ready(self) -> None:
        from django.conf import settings

        from ledger.spend import services
        from observability import metrics
        from passthru import upstream

        services.add_observer(metrics.OBSERVER)
        upstream.watch_queue(metrics.UPSTREAM_QUEUED.inc)
        if settings.MARINA_OTEL_EXPORT:
            # Only now is OpenTelemetry imported: unset, it costs nothing.
            from observability import otel

            services.add_observer(otel.start())
