"""Route tables of the dashboard, one module per page family.

A path parameter written ``{job_id:job_id}`` takes the rest of the path as one
job id, any character included (``/`` and newlines too, percent-encoded in the
link): a foreign producer's ids stay reachable. Starlette keeps convertors in
one table, so the convertor is registered here, before a route module builds
its routes.
"""

from starlette.convertors import register_url_convertor

from orders.web.params import JobIdConvertor

register_url_convertor("job_id", JobIdConvertor())
