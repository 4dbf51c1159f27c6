"use strict";
// The runstate dashboard: the caller's tasks, and one task followed live over
// graphql-transport-ws. A task opens with its SNAPSHOT and the last page of its
// log; each later event is a delta applied to the task held here. After a dropped
// socket or a server restart it resubscribes with afterSeq, so the page never
// needs a reload and never shows a gap.

const TOKEN_KEY = "runstate-token";
const STEP_FIELDS = "index action status idempotent attempts error output startedAt completedAt";
const TOOL_FIELDS = "toolName status retryCount maxRetries lastError rateLimitResetAt";
const LOCK_FIELDS = "holderId fencingToken expiresAt";
const TASK_FIELDS = `id goal status version currentStep totalSteps eventSeq stalled
  steps { ${STEP_FIELDS} } toolStates { ${TOOL_FIELDS} } lock { ${LOCK_FIELDS} }`;
const PROGRESS = `subscription($taskId: ID!, $afterSeq: Int) {
  taskProgress(taskId: $taskId, afterSeq: $afterSeq) {
    seq kind taskVersion stepIndex toolName at status stalled steps { ${STEP_FIELDS} }
    toolState { ${TOOL_FIELDS} } lock { ${LOCK_FIELDS} } task { ${TASK_FIELDS} } }
}`;
const LOG_PAGE = `query($id: ID!, $after: Int!, $first: Int!) { task(id: $id) {
  ... on Task { events(afterSeq: $after, first: $first) { seq kind stepIndex toolName at } } } }`;
const FINISHED = new Set(["SUCCESS", "SKIPPED"]);
const LEASE_EVENTS = new Set(["LOCK_ACQUIRED", "LOCK_RELEASED"]);
const PAGE = 100; // the most a list may return at once
const LOG_LINES = 500; // the event log keeps the newest lines; the server keeps them all

const $ = (id) => document.getElementById(id);
let token = null;
let current = null; // { id, task, lastSeq }
let socket = null;
let retryDelay = 500;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child ?? ""));
  return node;
}

function readFragment() {
  // The token arrives in the fragment (never sent to a server, never logged) and is
  // kept for this tab only; the address bar keeps just the task.
  const params = new URLSearchParams(location.hash.slice(1));
  if (params.get("token")) {
    sessionStorage.setItem(TOKEN_KEY, params.get("token"));
    params.delete("token");
    history.replaceState(null, "", location.pathname + (params.toString() ? "#" + params : ""));
  }
  token = sessionStorage.getItem(TOKEN_KEY);
  return params.get("task");
}

async function graphql(query, variables) {
  const response = await fetch("/graphql", {
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer " + token },
    body: JSON.stringify({ query, variables }),
  });
  if (response.status === 401) { signOut(); throw new Error("signed out"); }
  const body = await response.json();
  if (body.errors) throw new Error(body.errors[0].message);
  return body.data;
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  token = null;
  $("signin").hidden = false;
  $("tasks").hidden = $("task").hidden = $("empty").hidden = true;
}

function setConnection(state, text) {
  const conn = document.querySelector(".conn");
  conn.dataset.state = state;
  conn.textContent = text;
}

// ------------------------------------------------------------- task list

async function loadTasks() {
  if (!token) return;
  try {
    const data = await graphql(`{ sessions(first: 20) { edges { node {
      id status messageCount lastActiveAt
      tasks(first: 20) { edges { node { id goal status currentStep totalSteps } } } } } } }`);
    $("task-list").replaceChildren(...data.sessions.edges.map(({ node: session }) => el("li",
      { class: "session", "data-session": session.id },
      el("div", { class: "session-head" }, el("span", {}, session.id),
        el("span", { class: "badge s-" + session.status }, session.status)),
      el("ul", {}, ...session.tasks.edges.map(({ node }) => taskLink(node))))));
  } catch (error) {
    console.warn("task list:", error.message);
  }
  setTimeout(loadTasks, 3000);
}

function taskLink(task) {
  const pct = percent(task.currentStep, task.totalSteps);
  const link = el("a", { href: "#task=" + encodeURIComponent(task.id), "data-task": task.id },
    task.goal, el("small", {}, `${task.status.toLowerCase()} · ${pct}%`));
  if (current && current.id === task.id) link.classList.add("current");
  return el("li", {}, link);
}

function percent(done, total) {
  return total ? Math.round((100 * done) / total) : 0;
}

// ------------------------------------------------------------- one task, live

function select(taskId) {
  if (!taskId) { $("task").hidden = true; $("empty").hidden = false; return; }
  current = { id: taskId, task: null, lastSeq: null };
  $("empty").hidden = true;
  $("task").hidden = false;
  $("events").replaceChildren();
  connect();
}

function connect() {
  if (socket) { const old = socket; socket = null; old.close(); }
  if (!current || !token) return;
  setConnection("connecting", "connecting…");
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(`${scheme}//${location.host}/graphql`, "graphql-transport-ws");
  socket = ws;
  const watching = current;
  ws.onopen = () => ws.send(JSON.stringify({
    type: "connection_init", payload: { authorization: "Bearer " + token } }));
  ws.onmessage = (message) => {
    const msg = JSON.parse(message.data);
    if (msg.type === "connection_ack") {
      retryDelay = 500;
      setConnection("live", "live");
      ws.send(JSON.stringify({ id: "1", type: "subscribe", payload: {
        // No afterSeq on the first subscription: a SNAPSHOT, then live deltas.
        query: PROGRESS, variables: { taskId: watching.id, afterSeq: watching.lastSeq } } }));
    } else if (msg.type === "next") {
      if (msg.payload.errors) setConnection("error", msg.payload.errors[0].message);
      else onEvent(watching, msg.payload.data.taskProgress);
    } else if (msg.type === "ping") {
      ws.send(JSON.stringify({ type: "pong" }));
    } else if (msg.type === "error") {
      setConnection("error", msg.payload[0].message);
    }
  };
  ws.onclose = (event) => {
    if (socket !== ws) return;
    socket = null;
    if (event.code === 4403) { signOut(); return; }
    setConnection("reconnecting", "reconnecting…");
    setTimeout(connect, retryDelay);
    retryDelay = Math.min(retryDelay * 2, 5000);
  };
}

function onEvent(watching, event) {
  if (watching !== current) return;
  if (watching.lastSeq !== null && event.seq <= watching.lastSeq) return;
  watching.lastSeq = event.seq;
  watching.task = applyEvent(watching.task, event);
  if (event.kind === "SNAPSHOT") loadLog(watching, event.seq);
  else logLine(event);
  render(watching.task);
}

// The task as of `event`, from the task as of the event before it (see TaskEvent).
function applyEvent(task, event) {
  if (event.task) return event.task;
  const steps = task.steps.slice();
  for (const step of event.steps) steps[step.index] = step;
  let toolStates = task.toolStates;
  if (event.toolState) {
    toolStates = toolStates.filter((t) => t.toolName !== event.toolState.toolName)
      .concat([event.toolState]).sort((a, b) => (a.toolName < b.toolName ? -1 : 1));
  }
  const unfinished = steps.findIndex((s) => !FINISHED.has(s.status));
  return { ...task, status: event.status, version: event.taskVersion, eventSeq: event.seq,
    stalled: event.stalled,
    steps, toolStates, totalSteps: steps.length,
    currentStep: unfinished === -1 ? steps.length : unfinished,
    lock: LEASE_EVENTS.has(event.kind) ? event.lock : task.lock };
}

// The log shows the newest events: the last page up to the snapshot, then live ones.
async function loadLog(watching, seq) {
  try {
    const older = [];
    for (let after = seq - Math.min(LOG_LINES, seq); after < seq; after += PAGE) {
      const first = Math.min(PAGE, seq - after);
      const data = await graphql(LOG_PAGE, { id: watching.id, after, first });
      if (watching !== current) return;
      older.push(...data.task.events);
    }
    const live = [...$("events").children];
    $("events").replaceChildren();
    for (const event of older) logLine(event);
    for (const line of live.reverse()) $("events").prepend(line);
  } catch (error) {
    console.warn("event log:", error.message);
  }
}

function logLine(event) {
  $("events").prepend(el("li", { value: event.seq, "data-seq": event.seq },
    `${event.kind}${event.stepIndex === null ? "" : " step " + event.stepIndex}` +
    `${event.toolName ? " " + event.toolName : ""} · ${new Date(event.at).toLocaleTimeString()}`));
  while ($("events").childElementCount > LOG_LINES) $("events").lastElementChild.remove();
}

function render(task) {
  const done = task.steps.filter((s) => FINISHED.has(s.status)).length;
  const pct = percent(done, task.totalSteps);
  $("goal").textContent = task.goal;
  $("status").textContent = task.status;
  $("status").className = "badge s-" + task.status;
  $("bar").style.width = pct + "%";
  $("percent").textContent = pct + "%";
  $("counts").textContent = `${done} of ${task.totalSteps} steps done`;
  $("version").textContent = task.version;
  $("lease").textContent = task.lock
    ? `leased by ${task.lock.holderId} (token ${task.lock.fencingToken}) until ${new Date(task.lock.expiresAt).toLocaleTimeString()}`
    : task.stalled ? "no agent: its lease lapsed; a worker will claim it" : "no lease";
  $("steps").replaceChildren(...task.steps.map(stepRow));
  const listed = document.querySelector(`#task-list a[data-task="${CSS.escape(task.id)}"] small`);
  if (listed) listed.textContent = `${task.status.toLowerCase()} · ${pct}%`;
  $("tools").replaceChildren(...task.toolStates.map((t) => el("tr", {},
    el("td", {}, t.toolName),
    el("td", {}, el("span", { class: "badge s-" + t.status }, t.status)),
    el("td", {}, `${t.retryCount} / ${t.maxRetries}`),
    el("td", {}, t.rateLimitResetAt && new Date(t.rateLimitResetAt) > new Date()
      ? new Date(t.rateLimitResetAt).toLocaleTimeString() : "—"),
    el("td", { class: "out err" }, t.lastError ?? ""))));
  const inDoubt = task.steps.find((s) => s.status === "IN_DOUBT");
  $("decision").hidden = !inDoubt;
  if (inDoubt) {
    $("decision-text").textContent = `"${inDoubt.action}" was running when its agent stopped, ` +
      "and it is not safe to repeat. Did it happen?";
  }
}

function stepRow(step) {
  const started = step.startedAt && new Date(step.startedAt);
  const ended = step.completedAt && new Date(step.completedAt);
  const time = !started ? "" : ended ? `${((ended - started) / 1000).toFixed(1)} s`
    : `since ${started.toLocaleTimeString()}`;
  const detail = step.error ?? (step.output === null ? "" : JSON.stringify(step.output));
  return el("tr", { "data-testid": "step-" + step.index, "data-status": step.status },
    el("td", {}, step.index),
    el("td", {}, step.action, step.idempotent ? "" : el("small", {}, " (not idempotent)")),
    el("td", {}, el("span", { class: "badge s-" + step.status }, step.status)),
    el("td", {}, step.attempts),
    el("td", { class: "time" }, time),
    el("td", { class: step.error ? "out err" : "out" }, detail));
}

async function decide(decision) {
  const task = current && current.task;
  const inDoubt = task && task.steps.find((s) => s.status === "IN_DOUBT");
  if (!inDoubt) return;
  $("decision-result").textContent = "…";
  try {
    const data = await graphql(`mutation($input: DecideStepInput!) { decideStep(input: $input) {
      __typename ... on Problem { message } } }`, { input: {
        taskId: task.id, stepIndex: inDoubt.index, expectedVersion: task.version, decision } });
    const result = data.decideStep;
    $("decision-result").textContent = result.__typename === "Task" ? "" : result.message;
  } catch (error) {
    $("decision-result").textContent = error.message;
  }
}

// ------------------------------------------------------------- start

function route() {
  const params = new URLSearchParams(location.hash.slice(1));
  const taskId = params.get("task");
  if (!current || current.id !== taskId) select(taskId);
}

$("signin-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  location.reload();
});
$("retry").addEventListener("click", () => decide("RETRY"));
$("skip").addEventListener("click", () => decide("SKIP"));
$("complete").addEventListener("click", () => decide("COMPLETE"));
window.addEventListener("hashchange", route);

readFragment();
if (!token) {
  signOut();
} else {
  // GraphiQL opens in a new tab, signed in: the token rides in the fragment.
  document.getElementById("graphiql").href = "/graphql#token=" + encodeURIComponent(token);
  $("tasks").hidden = false;
  loadTasks();
  route();
}
