"""Where orders come from: the TPC-H data set and random orders.

``tpch`` generates the TPC-H tables with ``tpchgen-cli`` and loads them as
the catalog and the order stream; ``drafts`` reads the next orders from that
stream, or makes random ones, as ``OrderDraft`` values for placement to
write. It may import ``orders.domain`` and ``workflows``, never the queue,
the application's wiring or an interface.
"""
