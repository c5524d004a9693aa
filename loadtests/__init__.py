"""Locust load tests for Triton (KServe v2) services, with SLO gates and reports.

Run ``python -m loadtests --help``. A locustfile picks users from ``loadtests.http_user`` and
``loadtests.grpc_users``; importing those starts gevent (Locust), so this package imports nothing eagerly.
"""
