// graphql-ws 6 (the reference client) against runstate's WebSocket refusals:
//   node sockets.mjs URL TOKEN
// where the server allows one connection per user. Prints one JSON line per
// client: the close codes it saw, in order, with the milliseconds between them.
import { createClient } from "graphql-ws";
import WebSocket from "ws";

const [url, token] = process.argv.slice(2);
const wsUrl = url.replace(/^http/, "ws") + "/graphql";

// Subscribe, and report every close until the subscription gives up.
function attempt(name, options) {
  const closes = [];
  let last = Date.now();
  const client = createClient({
    url: wsUrl,
    webSocketImpl: WebSocket,
    on: {
      closed: (event) => {
        const now = Date.now();
        closes.push({ code: event.code, reason: event.reason, afterMs: now - last });
        last = now;
      },
    },
    ...options,
  });
  return new Promise((resolve) => {
    client.subscribe({ query: "subscription { sessionActivity(sessionId: \"none\") { seq } }" }, {
      next: () => {},
      error: (error) => resolve({ client: name, closes, gaveUp: error?.code ?? String(error) }),
      complete: () => resolve({ client: name, closes, gaveUp: null }),
    });
  }).finally(() => client.dispose());
}

// One connection holds the user's only place, following a session of its own.
const answer = await fetch(`${url}/graphql`, {
  method: "POST",
  headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
  body: JSON.stringify({ query: "mutation { startSession(input: {}) { ... on AgentSession { id } } }" }),
});
const session = (await answer.json()).data.startSession.id;
const holder = createClient({ url: wsUrl, webSocketImpl: WebSocket, connectionParams: { authorization: `Bearer ${token}` } });
await new Promise((resolve, reject) => {
  holder.on("connected", resolve);
  holder.on("closed", reject);
  const query = `subscription { sessionActivity(sessionId: "${session}") { seq } }`;
  holder.subscribe({ query }, { next: () => {}, error: reject, complete: () => {} });
});

const results = await Promise.all([
  // Past the limit: graphql-ws's own retries, with their backoff.
  attempt("over-the-limit", { connectionParams: { authorization: `Bearer ${token}` }, retryAttempts: 2 }),
  // A refused token, with the shouldRetry docs/clients.md gives: one close, no retry.
  attempt("refused-token", {
    connectionParams: { authorization: "Bearer rs_wrong" },
    shouldRetry: (event) => event.code !== 4403,
  }),
]);
await holder.dispose();
for (const result of results) console.log(JSON.stringify(result));
