"""The headers a response carries from what the gateway decided for its call: AI Gateway's cache status and
fallback step, the node that answered on a cluster, and the rate limits as they stood at admission."""

from cirrus.cache import STATUS_HEADER
from cirrus.gateway.call import Call

STEP_HEADER = "cf-aig-step"
NODE_HEADER = "x-cirrus-node"


def call_headers(call: Call) -> dict[str, str]:
    headers = call.rate_status.headers() if call.rate_status is not None else {}
    if call.cache_status is not None:
        headers[STATUS_HEADER] = call.cache_status
    if call.step is not None:
        headers[STEP_HEADER] = str(call.step)
    if call.node_id is not None:
        headers[NODE_HEADER] = call.node_id
    return headers
