"""``python -m loadtests tune``: find the batching and instance settings that serve the most under the SLO.

Each candidate setting is served by the service itself (``python -m <package>``) on free ports and driven
with the load-test library at rising user counts until the SLO breaks; a coordinate search picks the next
candidate. See loadtests/README.md ("Tuning").
"""

__all__: list[str] = []
