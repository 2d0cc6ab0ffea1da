"""What the service tells its operators: metrics and logs.

``metrics``
    The Prometheus metrics, one registry per service instance; labels by leg, topic, state or
    reason, never by partition.
``logs``
    structlog set-up (JSON lines or console), with aiokafka's own logs routed through it and
    rate-limited.

Every other package may import these; they import nothing of the product.
"""
