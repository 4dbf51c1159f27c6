"""GraphQL over HTTP as the draft specifies it, checked on a real server: the media
type negotiated on ``Accept``, no ``data`` on a request error, request errors as 400
under ``application/graphql-response+json`` and 200 under ``application/json``,
and every refusal a JSON body (405 with ``Allow``, 406, 415). The graphql-http
audit checks the same from Node (``test_clients``); these say exactly what each
answer is."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from runstate.transport.media import negotiate
from tests.support import Api

NEW = "application/graphql-response+json"
OLD = "application/json"


def post(api: Api, body: dict[str, Any], accept: str | None) -> httpx.Response:
    """POST ``body`` with ``accept`` as its Accept header (None: no Accept at all)."""
    request = api.http.build_request("POST", "/graphql", json=body)
    if accept is None:
        del request.headers["accept"]
    else:
        request.headers["accept"] = accept
    return api.http.send(request)


@pytest.mark.parametrize(
    ("accept", "chosen"),
    [
        (None, OLD),
        ("*/*", OLD),
        (OLD, OLD),
        (NEW, NEW),
        (f"{NEW}, {OLD};q=0.9", NEW),
        (f"{OLD}, {NEW}", NEW),
        (f"{NEW};q=0.5, {OLD}", OLD),
        (f"{OLD};q=0, */*;q=0.1", NEW),
        ("application/*", OLD),
    ],
)
def test_a_result_takes_the_media_type_the_client_prefers(
    alice: Api, accept: str | None, chosen: str
) -> None:
    response = post(alice, {"query": "{ __typename }"}, accept)
    assert (response.status_code, response.headers["content-type"]) == (200, chosen)
    assert response.json() == {"data": {"__typename": "Query"}}


@pytest.mark.parametrize(
    "body",
    [
        {"query": "{ sessions { "},  # does not parse
        {"query": "{ nope }"},  # does not validate
        {"query": "query($n: Int!) { sessions(first: $n) { pageInfo { hasNextPage } } }"},
    ],
    ids=["parse", "validation", "variables"],
)
def test_a_request_error_has_no_data_and_its_status_follows_the_media_type(
    alice: Api, body: dict[str, Any]
) -> None:
    """Guards ``process_result`` (no ``data`` when execution never began) and
    ``create_response`` (400 under the new media type, 200 under the old)."""
    for accept, status in ((NEW, 400), (OLD, 200), (None, 200)):
        response = post(alice, body, accept)
        answer = response.json()
        assert response.status_code == status, accept
        assert "data" not in answer, accept
        assert len(answer["errors"]) == 1
        assert "path" not in answer["errors"][0]


def test_an_execution_error_keeps_its_data_and_a_200(alice: Api) -> None:
    """Control: a field error is not a request error; ``data`` stays, and so does 200."""
    response = post(
        alice, {"query": '{ tasks(first: 1, after: "bad") { pageInfo { hasNextPage } } }'}, NEW
    )
    answer = response.json()
    assert response.status_code == 200
    assert answer["data"] is None
    assert answer["errors"][0]["path"] == ["tasks"]


def test_an_unacceptable_accept_is_406(alice: Api) -> None:
    response = post(alice, {"query": "{ __typename }"}, "image/png")
    assert (response.status_code, response.headers["content-type"]) == (406, OLD)
    assert response.json() == {
        "errors": [{"message": f"Not Acceptable: the answer is {NEW} or {OLD}"}]
    }


def test_a_body_that_is_not_json_is_415(alice: Api) -> None:
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {} if content_type is None else {"content-type": content_type}
        response = alice.http.post("/graphql", content=b"query={__typename}", headers=headers)
        assert response.status_code == 415, content_type
        assert response.json() == {
            "errors": [{"message": "Unsupported Media Type: send the request as application/json"}]
        }


def test_another_method_is_405_with_allow(alice: Api) -> None:
    for method in ("PUT", "DELETE", "PATCH"):
        response = alice.http.request(method, "/graphql")
        assert (response.status_code, response.headers["allow"]) == (405, "GET, POST"), method
        assert response.json() == {
            "errors": [{"message": "GraphQL only supports GET and POST requests."}]
        }


def test_strawberrys_own_refusals_are_json_in_the_media_type_asked_for(alice: Api) -> None:
    """Guards ``GraphQLView.__call__``: Strawberry answers these in plain text."""
    for accept in (NEW, OLD):
        response = alice.http.post(
            "/graphql",
            content=b'{"variables": {}}',
            headers={"content-type": OLD, "accept": accept},
        )
        assert (response.status_code, response.headers["content-type"]) == (400, accept)
        assert response.json() == {"errors": [{"message": "No GraphQL query found in the request"}]}


def test_the_graphiql_page_still_opens_for_a_browser(alice: Api) -> None:
    """Control for 406: a browser's GET of the page accepts text/html only."""
    response = alice.http.get("/graphql", headers={"accept": "text/html"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")


def test_negotiate_refuses_what_q_zero_refuses() -> None:
    assert negotiate(f"{NEW};q=0, {OLD};q=0, */*") is None
    assert negotiate("*/*;q=0") is None
    assert negotiate(f"{NEW};q=abc") is None
