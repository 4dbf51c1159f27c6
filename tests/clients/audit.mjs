// The GraphQL-over-HTTP audit of graphql-http, run against a runstate server:
// node audit.mjs URL TOKEN prints one JSON line per audit ({id, name, status,
// reason}). Every request carries the token: runstate answers 401 without one.
import { serverAudits } from "graphql-http";

const [url, token] = process.argv.slice(2);

function withToken(input, init = {}) {
  const headers = new Headers(init.headers);
  headers.set("authorization", `Bearer ${token}`);
  return fetch(input, { ...init, headers });
}

for (const audit of serverAudits({ url, fetchFn: withToken })) {
  const result = await audit.fn();
  console.log(JSON.stringify({
    id: audit.id,
    name: audit.name,
    status: result.status,
    reason: result.status === "ok" ? null : result.reason,
  }));
}
