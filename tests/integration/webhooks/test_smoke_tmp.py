from gateway import GatewayFactory
from routeharness import Api, webhooks_config


def test_smoke(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(webhooks_config())
    print(gw.stdout_lines)
    with gw.client() as c:
        api = Api(c)
        r = api.call("create_flow", goal="x")
        print(r.status_code, r.text, r.headers)
        r = c.get("/plugins/webhooks/ci")
        print(r.status_code, r.text, r.headers)
