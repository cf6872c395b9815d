"""The pool as people and tools read it: the queue and its reasons (`queueview/`), scorecards
and capacity signals (`scorecards/`), Prometheus `/metrics` (`metrics/`), the HTML report
(`report/`) and node-pool demand for autoscalers (`autoscale/`). Reads every other domain
package; none of them imports this one. Not Dagster.
"""
