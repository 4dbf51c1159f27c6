// The frames graphql-ws 6 (the reference client) receives for taskProgress:
//   node frames.mjs URL TOKEN
// Two clients, each on its own socket, watch one new task of two steps: the
// first with two subscriptions (a SNAPSHOT one and an afterSeq: 0 one), the
// second with one. Once each has its first event, the task's steps are started
// and completed over HTTP; once every subscription has seen seq 5, all end.
// Prints one JSON line per text frame a socket received, in order:
// {client, frame} with the frame's text exactly as it came, then one line per
// subscription: {client, subscription, seqs} as graphql-ws handed them to next.
import { createClient } from "graphql-ws";
import WebSocket from "ws";

const [url, token] = process.argv.slice(2);
const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };

async function graphql(query, variables) {
  const response = await fetch(`${url}/graphql`, {
    method: "POST",
    headers,
    body: JSON.stringify({ query, variables }),
  });
  const body = await response.json();
  if (body.errors) throw new Error(JSON.stringify(body.errors));
  return body.data;
}

const frames = [];
// The ws WebSocket, noting every text frame before graphql-ws reads it.
function recording(client) {
  return class extends WebSocket {
    constructor(...args) {
      super(...args);
      this.on("message", (data, binary) => {
        if (!binary) frames.push({ client, frame: data.toString("utf8") });
      });
    }
  };
}

const SELECTION = "seq kind taskVersion stepIndex status task { id version steps { index status } }";
const session = await graphql("mutation { startSession(input: {}) { ... on AgentSession { id } } }");
const created = await graphql(
  "mutation($input: CreateTaskInput!) { createTask(input: $input) { ... on Task { id version } } }",
  {
    input: {
      sessionId: session.startSession.id,
      goal: "frames",
      steps: [{ action: "search" }, { action: "write" }],
    },
  },
);
const taskId = created.createTask.id;

const LAST = 5; // createTask's event, then two starts and two completions
const watched = [];
function watch(client, name, afterSeq) {
  const seqs = [];
  let first;
  const firstSeen = new Promise((resolve) => (first = resolve));
  const done = new Promise((resolve, reject) => {
    const variables = { id: taskId, ...(afterSeq === undefined ? {} : { after: afterSeq }) };
    const query =
      afterSeq === undefined
        ? `subscription($id: ID!) { taskProgress(taskId: $id) { ${SELECTION} } }`
        : `subscription($id: ID!, $after: Int) { taskProgress(taskId: $id, afterSeq: $after) { ${SELECTION} } }`;
    const stop = client.socket.subscribe(
      { query, variables },
      {
        next: ({ data }) => {
          seqs.push(data.taskProgress.seq);
          first();
          if (data.taskProgress.seq >= LAST) {
            stop();
            resolve();
          }
        },
        error: reject,
        complete: resolve,
      },
    );
  });
  watched.push({ client: client.name, subscription: name, seqs });
  return { firstSeen, done };
}

const clients = ["a", "b"].map((name) => ({
  name,
  socket: createClient({
    url: url.replace(/^http/, "ws") + "/graphql",
    webSocketImpl: recording(name),
    connectionParams: { authorization: `Bearer ${token}` },
    lazy: true,
    shouldRetry: () => false,
  }),
}));
const subscriptions = [
  watch(clients[0], "snapshot"),
  watch(clients[0], "after 0", 0),
  watch(clients[1], "snapshot"),
];
await Promise.all(subscriptions.map((s) => s.firstSeen));

let version = created.createTask.version;
for (const index of [0, 1]) {
  for (const [name, kind] of [["startStep", "StepRefInput"], ["completeStep", "CompleteStepInput"]]) {
    const data = await graphql(
      `mutation($input: ${kind}!) { ${name}(input: $input) { ... on Task { version } } }`,
      { input: { taskId, stepIndex: index, expectedVersion: version } },
    );
    version = data[name].version;
  }
}
await Promise.all(subscriptions.map((s) => s.done));
for (const client of clients) await client.socket.dispose();
for (const frame of frames) console.log(JSON.stringify(frame));
for (const subscription of watched) console.log(JSON.stringify(subscription));
