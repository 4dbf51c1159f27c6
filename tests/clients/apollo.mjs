// The Apollo Client recipe of docs/clients.md, run against a runstate server:
//   node apollo.mjs URL TOKEN POSSIBLE_TYPES_JSON [--naive]
// prints one JSON line per check ({check, ok, detail}). --naive runs the same
// checks with Apollo's default cache (no type policies, no possibleTypes): the
// control that shows what the recipe prevents.
import { readFileSync } from "node:fs";
import { ApolloClient, ApolloLink, HttpLink, InMemoryCache, gql } from "@apollo/client";
import { GraphQLWsLink } from "@apollo/client/link/subscriptions";
import { getMainDefinition } from "@apollo/client/utilities";
import { createClient } from "graphql-ws";
import WebSocket from "ws";

const [url, token, typesFile, mode] = process.argv.slice(2);
const naive = mode === "--naive";
const possibleTypes = JSON.parse(readFileSync(typesFile, "utf8"));

// ---------------------------------------------------------------- the recipe
// docs/clients.md shows this part as it is (test_clients checks that it does).

// Keep the task with the newer eventSeq: a history read or a replayed idempotent
// write answers an older state of a task under its live id.
function newerTask(existing, incoming, { readField, mergeObjects }) {
  const have = readField("eventSeq", existing);
  const got = readField("eventSeq", incoming);
  if (existing && have !== undefined && got !== undefined && got < have) return existing;
  return mergeObjects(existing, incoming);
}

// A task's steps, merged by Step.id: an answer selecting fewer fields keeps the others.
function stepsById(existing = [], incoming, { readField, mergeObjects }) {
  const known = new Map(existing.map((step) => [readField("id", step), step]));
  return incoming.map((step) => {
    const before = known.get(readField("id", step));
    return before ? mergeObjects(before, step) : step;
  });
}

const cache = new InMemoryCache({
  possibleTypes, // the JSON of `runstate export-schema --possible-types`
  typePolicies: {
    Task: { merge: newerTask, fields: { steps: { merge: stepsById } } },
    Step: { keyFields: false }, // kept inside its task, so the task's rule covers it
    NotFound: { keyFields: false }, // a missing task and session may share an id
  },
});

const headers = { authorization: `Bearer ${token}` };
const ws = createClient({
  url: url.replace(/^http/, "ws") + "/graphql",
  webSocketImpl: WebSocket, // Node 20; a browser has its own
  connectionParams: headers,
  // graphql-ws would re-send the original subscription on reconnect, with its old
  // afterSeq; end the subscription instead, and resubscribe from the last seq seen.
  // A refused token (4403) is not retried either.
  shouldRetry: () => false,
});
const link = ApolloLink.split(
  ({ query }) => getMainDefinition(query).operation === "subscription",
  new GraphQLWsLink(ws),
  new HttpLink({ uri: `${url}/graphql`, headers }),
);

// Follow a task live; after a dropped socket resubscribe with the last seq seen, so
// the server sends what was missed, once. taskAt is read with fetchPolicy
// "no-cache": the task as it stood then, under the live task's id, is for showing,
// not for the cache.
function follow(client, taskId, onEvent) {
  let lastSeq = null;
  let subscription = null;
  const start = () => {
    subscription = client.subscribe({ query: PROGRESS, variables: { taskId, afterSeq: lastSeq } })
      .subscribe({
        next: ({ data, error }) => {
          if (error) { // Apollo Client 4 delivers a closed socket as a result with an error
            subscription.unsubscribe();
            setTimeout(start, 200);
            return;
          }
          if (lastSeq !== null && data.taskProgress.seq <= lastSeq) return;
          lastSeq = data.taskProgress.seq;
          onEvent(data.taskProgress);
        },
      });
  };
  start();
  return () => subscription.unsubscribe();
}

// ---------------------------------------------------------------- documents

const PROBLEM = "__typename ... on Problem { code message }";
const STEP = "id index action status output";
const TASK = gql`query Task($id: ID!) { task(id: $id) { ${PROBLEM}
  ... on Task { id version eventSeq status steps { ${STEP} } } } }`;
const TASK_AT = gql`query TaskAt($id: ID!, $seq: Int!) { taskAt(id: $id, seq: $seq) { ${PROBLEM}
  ... on Task { id version eventSeq status steps { ${STEP} } } } }`;
const SESSION = gql`query Session($id: ID!) { session(id: $id) { ${PROBLEM} ... on NotFound { id } } }`;
const MISSING_TASK = gql`query Missing($id: ID!) { task(id: $id) { ${PROBLEM} ... on NotFound { id } } }`;
const START_SESSION = gql`mutation { startSession(input: {}) { ${PROBLEM} ... on AgentSession { id } } }`;
const CREATE = gql`mutation Create($input: CreateTaskInput!) { createTask(input: $input) { ${PROBLEM}
  ... on Task { id version eventSeq status steps { ${STEP} } } } }`;
// Writes select fewer step fields than the query above: partial selections.
const START = gql`mutation Start($input: StepRefInput!) { startStep(input: $input) { ${PROBLEM}
  ... on Task { id version eventSeq status steps { id status } } } }`;
const COMPLETE = gql`mutation Complete($input: CompleteStepInput!) { completeStep(input: $input) { ${PROBLEM}
  ... on VersionConflict { currentVersion }
  ... on Task { id version eventSeq status steps { id status } } } }`;
const FORK = gql`mutation Fork($input: ForkTaskInput!) { forkTask(input: $input) { ${PROBLEM}
  ... on Task { id version eventSeq status steps { ${STEP} } } } }`;
const PROGRESS = gql`subscription Progress($taskId: ID!, $afterSeq: Int) {
  taskProgress(taskId: $taskId, afterSeq: $afterSeq) { seq kind } }`;

// ---------------------------------------------------------------- the checks

const client = new ApolloClient({ link, cache: naive ? new InMemoryCache() : cache });
let opened = 0;
ws.on("connected", () => { opened += 1; });
const results = [];
function check(name, ok, detail) {
  results.push({ check: name, ok: Boolean(ok), detail });
}
const cached = (id) => client.readQuery({ query: TASK, variables: { id } })?.task;
const write = async (mutation, input) => (await client.mutate({ mutation, variables: { input } })).data;

const session = (await write(START_SESSION)).startSession;
const created = (await write(CREATE, {
  sessionId: session.id,
  goal: "apollo",
  steps: [{ action: "search", input: { q: 1 } }, { action: "book" }, { action: "mail" }],
})).createTask;
const id = created.id;
await client.query({ query: TASK, variables: { id } });

const seen = [];
const stop = follow(client, id, (event) => seen.push(event));
const until = async (what, predicate) => {
  for (let i = 0; i < 200 && !predicate(); i++) await new Promise((r) => setTimeout(r, 25));
  if (!predicate()) throw new Error(`timed out waiting for ${what}`);
};
await until("the snapshot", () => seen.length === 1);

let version = 1;
const started = (await write(START, { taskId: id, stepIndex: 0, expectedVersion: version, idempotencyKey: `${id}:start:0` })).startStep;
version = started.version;
const keyed = { taskId: id, stepIndex: 0, expectedVersion: version, output: { found: 3 }, idempotencyKey: `${id}:complete:0` };
const first = (await write(COMPLETE, keyed)).completeStep;
version = first.version;
await client.query({ query: TASK, variables: { id }, fetchPolicy: "network-only" }); // outputs read
await until("two live events", () => seen.length === 3);
ws.terminate(); // the socket drops; follow() resubscribes with afterSeq
version = (await write(START, { taskId: id, stepIndex: 1, expectedVersion: version })).startStep.version;
version = (await write(COMPLETE, { taskId: id, stepIndex: 1, expectedVersion: version, output: "booked" })).completeStep.version;

let live = cached(id);
check("partial selections keep the other step fields",
  live.steps.map((step) => step.action).join() === "search,book,mail"
    && JSON.stringify(live.steps[0].output) === '{"found":3}' && live.steps[1].status === "SUCCESS",
  live.steps);

const past = (await client.query({ query: TASK_AT, variables: { id, seq: 1 }, fetchPolicy: naive ? "cache-first" : "no-cache" })).data.taskAt;
live = cached(id);
check("taskAt answers the past", past.version === 1 && past.steps[0].status === "PENDING", past);
check("the live task keeps its latest version after taskAt", live.version === version, { cached: live.version, server: version });

const raw = (await client.mutate({ mutation: COMPLETE, variables: { input: keyed }, fetchPolicy: "no-cache" })).data.completeStep;
check("a replayed idempotent write answers as it first did", raw.version === first.version, raw);
await write(COMPLETE, keyed); // the same replay, through the cache
live = cached(id);
check("the live task keeps its latest version after a replay", live.version === version && live.steps[1].status === "SUCCESS", { cached: live.version, server: version });

await client.query({ query: TASK, variables: { id }, fetchPolicy: "network-only" });
const fork = (await write(FORK, { taskId: id, atSeq: 2 })).forkTask;
live = cached(id);
check("a fork is a task of its own, PLANNED", fork.id !== id && fork.status === "PLANNED", fork);
check("the live task keeps its latest version after a fork", live.version === version, { cached: live.version });

const stale = (await write(COMPLETE, { taskId: id, stepIndex: 2, expectedVersion: 1, output: "x" })).completeStep;
check("a Problem's fields are read through its interface", stale.__typename === "VersionConflict"
  && stale.code === "VERSION_CONFLICT" && typeof stale.message === "string" && stale.currentVersion === version, stale);

await client.query({ query: MISSING_TASK, variables: { id: "nowhere" } });
await client.query({ query: SESSION, variables: { id: "nowhere" } });
const missingTask = client.readQuery({ query: MISSING_TASK, variables: { id: "nowhere" } }).task;
const missingSession = client.readQuery({ query: SESSION, variables: { id: "nowhere" } }).session;
const entities = Object.keys(client.cache.extract());
check("NotFound answers are not one cache entity",
  missingTask.message !== missingSession.message && !entities.some((k) => k.startsWith("NotFound")),
  { task: missingTask.message, session: missingSession.message });

await until("every event once, in order", () => seen.length === 5);
await new Promise((r) => setTimeout(r, 200)); // room for a repeat to show itself
const seqs = seen.map((e) => e.seq);
check("a resumed subscription misses nothing and repeats nothing",
  JSON.stringify(seqs) === JSON.stringify([1, 2, 3, 4, 5]) && seen[0].kind === "SNAPSHOT"
    && seen.filter((e) => e.kind === "SNAPSHOT").length === 1 && opened === 2,
  { seqs, kinds: seen.map((e) => e.kind), sockets: opened });

stop();
await ws.dispose();
for (const result of results) console.log(JSON.stringify(result));
