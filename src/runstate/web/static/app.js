"use strict";
// The runstate dashboard: the caller's sessions and tasks, and one task followed
// live over graphql-transport-ws. A task opens with its SNAPSHOT and the last page
// of its log; each later event is a delta applied to the task held here. After a
// dropped socket or a server restart it resubscribes with afterSeq, so the page
// never needs a reload and never shows a gap. Renewing a lease writes no event, so
// the lease of an active task is also read every few seconds: that is how the page
// sees an agent die (its lease stops moving, runs out, and the task stalls).
// Under the task, its session's ledger (the inputs sent to the session, in the
// order they run) is followed live too, with a form to send one and the session's
// schedules.

const TOKEN_KEY = "runstate-token";
// The fields of a step the page draws; any other a step's documents ask for
// (STEP_REPORTED in runstate/web/dashboard.py) is shown under it as "name: value".
const STEP_DRAWN = new Set(["index", "action", "status", "idempotent", "attempts", "error", "output",
  "startedAt", "completedAt", "spend", "models"]);
// The page's GraphQL documents (runstate/web/dashboard.py) from the server's manifest of
// trusted documents: queries and mutations are named by id, the subscription sent as text.
const DOCUMENTS = fetch("/static/documents.json").then((r) => r.json()).then((manifest) =>
  Object.fromEntries(manifest.operations.map((o) => [o.name, o])));

const FINISHED = new Set(["SUCCESS", "SKIPPED"]);
const FINAL = new Set(["COMPLETED", "FAILED", "CANCELLED"]);
const CLOSED_SESSIONS = new Set(["COMPLETED", "EXPIRED"]); // no claim hands out their tasks, only an open one's
const AGENT_STATUSES = new Set(["RUNNING", "WAITING_TOOL"]); // a lapsed lease stalls these
const FOLLOW = "follow"; // the address of a page following the newest task: #follow&task=...
const LEASE_EVENTS = new Set(["LOCK_ACQUIRED", "LOCK_RELEASED"]);
const PAGE = 100; // the most a list may return at once
const LOG_LINES = 500; // the log keeps the newest events; the server keeps them all
const LEASE_CHECK_MS = 2000;
const LEASE_GRACE_MS = 2000; // how long past its end a lease waits for the server's word
const RENEWAL_SLACK_MS = 300; // how long after a renewal is due the page reads the lease
const TICK_MS = 1000;
const SPEND_READ_MS = 300; // a burst of events reads the task's and session's spend once
const EMPTY_TASK = { status: "PLANNED", steps: [], toolStates: [], lock: null, stalled: false };

const $ = (id) => document.getElementById(id);
let token = null;
let promised = null; // the address (fragment) the Sign-in page said it opens, if any
let current = null; // { id, task, lastSeq, epoch, entries, told, holes, doubts, runs, pending, past, source }
let following = false; // opened on no task in particular: follow the newest active one
let followedSession = null; // following the tasks of this session only (#session=)
let socket = null;
let retryDelay = 500;
let sessionsRead = []; // the session list as last read, newest session first
let listedAs = null; // the followed task as the list last showed it (listKey)
let scrubTimer = null;
let scrubTo = null; // the seq the history slider was moved to, until the page shows it
let lastLeaseCheck = 0;
let listTimer = null; // the next read of the session list

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// ------------------------------------------------------------- words and times

const clock = (time) => (time === null ? "" : new Date(time).toLocaleTimeString()); // an ISO string or ms
const ms = (iso) => (iso ? Date.parse(iso) : null);
const held = (lock, now) => Boolean(lock) && ms(lock.expiresAt) > now; // a live lease

function seconds(milliseconds) {
  const s = Math.max(0, milliseconds) / 1000;
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 120) return `${Math.round(s)} s`;
  const m = Math.floor(s / 60);
  return m < 120 ? `${m} min ${Math.round(s % 60)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

function words(status) {
  return status.toLowerCase().replace(/_/g, " ");
}

function json(value) {
  return value === null || value === undefined ? "" : JSON.stringify(value);
}

function stepName(step) {
  return `step ${step.index} ${step.action}`;
}

// ------------------------------------------------------------- the server

async function graphql(name, variables, asToken) {
  const documentId = "sha256:" + (await DOCUMENTS)[name].id;
  const response = await fetch("/graphql", {
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer " + (asToken ?? token) },
    body: JSON.stringify({ documentId, variables }),
  });
  if (response.status === 401) {
    if (asToken === undefined) signOut("This page's token was refused (revoked or expired). Sign in again.");
    throw new Refused();
  }
  const body = await response.json();
  if (body.errors) throw new Error(body.errors[0].message);
  return body.data;
}

class Refused extends Error {
  constructor() { super("token refused"); }
}

// ------------------------------------------------------------- signing in

// A token arrives in a link's fragment (never sent to a server, never logged). A tab
// keeps the token it signed in with (sessionStorage), so tabs signed in as two users
// stay so; the browser remembers the last one signed in with (localStorage), so that
// a link with no token (the SDK's "waits for a person" line) opened in a new tab is
// signed in too. Signing out forgets both.

// The token of the link in the address bar, taken out of it: the address bar keeps
// just what the link names (a task, a session).
function takeToken() {
  const params = new URLSearchParams(location.hash.slice(1));
  const given = params.get("token");
  if (!given) return null;
  params.delete("token");
  history.replaceState(null, "", location.pathname + (params.toString() ? "#" + params : ""));
  return given;
}

function keepToken(given) {
  sessionStorage.setItem(TOKEN_KEY, given);
  localStorage.setItem(TOKEN_KEY, given);
  token = given;
}

// On load: the link's token, else this tab's, else the browser's last (the tab's
// own from now on, whoever signs in elsewhere later).
function readToken() {
  const given = takeToken();
  if (given) keepToken(given);
  else token = sessionStorage.getItem(TOKEN_KEY) ?? localStorage.getItem(TOKEN_KEY);
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
}

// The address changed within the tab (a link clicked or pasted): a token link signs
// the tab in at once, as another user if the token is another's, and the page opens
// what the link names; a link naming nothing (`runstate token link`'s) opens what
// the Sign-in page said it would.
function onHashChange() {
  const given = takeToken();
  if (given === null) {
    if (token) route();
    else nameTheLink();
    return;
  }
  if (token === null && promised !== null && !names(location.hash)) {
    history.replaceState(null, "", location.pathname + "#" + promised);
  }
  const another = given !== token;
  keepToken(given);
  if (!another) { route(); return; }
  leave();
  start();
}

// Signed out: this tab's token is forgotten, and the browser's too when it is the
// same (a token the server refused; the Sign out button forgets the browser's
// whatever it is).
function signOut(why) {
  sessionStorage.removeItem(TOKEN_KEY);
  if (localStorage.getItem(TOKEN_KEY) === token) localStorage.removeItem(TOKEN_KEY);
  token = null;
  leave();
  $("signin").hidden = false;
  $("signin-error").hidden = !why;
  $("signin-error").textContent = why || "";
  $("tasks").hidden = $("task").hidden = $("empty").hidden = $("signout").hidden = true;
  $("needs").hidden = true;
  document.title = "runstate";
  nameTheLink();
}

// Drops what the page shows for a token: the task, the session's ledger, the list.
function leave() {
  if (current) leaveTask();
  closeLedger();
  clearTimeout(listTimer);
  sessionsRead = [];
  listedAs = null;
  $("task-list").replaceChildren();
  $("missing").hidden = true;
  setConnection("idle", "not connected");
}

// Whether an address names a task or a session to open.
function names(hash) {
  const params = new URLSearchParams(hash.slice(1));
  return Boolean(params.get("task") || params.get("session"));
}

// What the Sign-in page opens once signed in: the task or session the link names,
// kept (its address's fragment) for a token link that names none.
function nameTheLink() {
  const params = new URLSearchParams(location.hash.slice(1));
  const named = params.get("task") ? "task " + params.get("task")
    : params.get("session") ? "session " + params.get("session") : null;
  promised = named === null ? null : location.hash.slice(1);
  $("signin-then").hidden = named === null;
  $("signin-then").textContent = named === null ? "" : `Once you sign in, the page opens ${named}.`;
}

async function signIn(candidate) {
  try {
    await graphql("pageSignIn", {}, candidate);
  } catch (error) {
    $("signin-error").hidden = false;
    $("signin-error").textContent = error instanceof Refused
      ? "That token was refused: it is mistyped, revoked, or from another runstate."
      : "Could not reach runstate: " + error.message;
    return;
  }
  keepToken(candidate);
  start();
}

function start() {
  $("signin").hidden = true;
  $("signout").hidden = false;
  $("tasks").hidden = false;
  // GraphiQL opens in a new tab, signed in: the token rides in the fragment.
  $("graphiql").href = "/graphql#token=" + encodeURIComponent(token);
  $("graphiql").hidden = document.body.dataset.graphiql === "off";
  if (matchMedia("(max-width: 760px)").matches) $("tasks").open = false;
  loadTasks();
  route();
}

function setConnection(state, text) {
  const conn = document.querySelector(".conn");
  conn.dataset.state = state;
  conn.textContent = text;
}

// ------------------------------------------------------------- sessions and tasks

async function loadTasks() {
  clearTimeout(listTimer); // a sign-in, a fork: one loop of reads, never two
  if (!token) return;
  const asToken = token;
  try {
    const data = await graphql("pageSessions");
    if (token !== asToken) return; // signed in anew meanwhile: that sign-in reads its own
    sessionsRead = data.sessions.edges.map((e) => e.node);
    showList();
    markNeeds();
    follow();
  } catch (error) {
    if (error instanceof Refused) return;
    console.warn("task list:", error.message);
  }
  clearTimeout(listTimer); // another read may have started while this one waited
  listTimer = setTimeout(loadTasks, 3000);
}

// The tasks of the sessions in the list, as last read.
function listed() {
  return sessionsRead.flatMap((s) => s.tasks.edges.map((e) => e.node));
}

function showList() {
  $("task-list").replaceChildren(...sessionsRead.map(sessionItem));
  listedAs = current && current.task ? listKey(known(current.task)) : null;
}

// What the list shows of a task.
function listKey(task) {
  return [task.id, task.status, task.currentStep, task.totalSteps, task.done, task.stalled,
    task.overBudget].join();
}

// A listed task as the page knows it: the followed one as its events left it, with
// no agent once its lease lapsed on this page's clock (the list is read every 3 s;
// events come at once).
function known(task) {
  if (!current || current.id !== task.id || !current.task) return task;
  const { status, currentStep, totalSteps, steps } = current.task;
  const done = finishedSteps(steps);
  const graphThread = task.graphThread || current.graph; // its events say so first
  const stalled = lapsed(current.task, Date.now());
  const overBudget = current.spent ? current.spent.overBudget : task.overBudget; // read after each event
  return { ...task, status, currentStep, totalSteps, done, graphThread, stalled, overBudget };
}

function sessionItem(session) {
  const tasks = session.tasks.edges.map((e) => known(e.node));
  const waiting = tasks.some(needsYou);
  return el("li", { class: "session", "data-session": session.id },
    el("div", { class: "session-head" },
      el("a", { class: "session-id", href: "#session=" + encodeURIComponent(session.id),
        title: "open this session: its inputs and schedules" }, session.id),
      waiting ? el("span", { class: "needs-mark" }, "needs you") : null,
      el("span", { class: "badge s-" + session.status }, words(session.status))),
    el("ul", {}, tasks.map((task) => taskLink(task, session))));
}

function needsYou(task) {
  return task.status === "AWAITING_DECISION";
}

// A listed task's progress: a share of its plan, or for a LangGraph thread (whose
// steps are added as its nodes run) the nodes run, as its header says. A task not
// followed counts the steps before its first unfinished one.
function taskLink(task, session) {
  const done = task.done ?? task.currentStep;
  const progress = task.graphThread ? nodesRun(done) : percent(done, task.totalSteps) + "%";
  const [state, dot] = listedState(task, session);
  return el("li", {}, el("a", {
    href: "#task=" + encodeURIComponent(task.id), "data-task": task.id,
    class: current && current.id === task.id ? "current" : null,
  }, el("span", { class: "dot s-" + dot }),
  el("span", { class: "goal" }, task.goal),
  needsYou(task) ? el("span", { class: "needs-mark" }, "needs you") : null,
  el("small", { "data-testid": "progress-" + task.id }, `${state} · ${progress}`),
  el("small", { class: "task-meta", "data-testid": "meta-" + task.id, title: task.origin ? null : task.id },
    taskMeta(task))));
}

// What a listed task is, in words and as its dot's state: its status, unless
// nothing will run it: its session closed (claims pass over a COMPLETED or EXPIRED
// session's tasks), its budget or its session's spent (until raised; a decision
// may still be made), or its agent gone.
function listedState(task, session) {
  if (FINAL.has(task.status)) return [words(task.status), task.status];
  if (CLOSED_SESSIONS.has(session.status)) return [`session ${words(session.status)}`, "STALLED"];
  if (task.overBudget && task.status !== "AWAITING_DECISION") return ["budget spent", "BUDGET"];
  if (task.stalled) return ["no agent", "STALLED"];
  return [words(task.status), task.status];
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

// What tells a listed task from others of the same goal: a fork's source and event,
// else its id (a UUID's start: a chosen id, "first-weekend", is shown whole); and
// when it was created.
function taskMeta(task) {
  const created = clock(task.createdAt);
  if (!task.origin) return `${UUID.test(task.id) ? task.id.slice(0, 8) : task.id} · created ${created}`;
  const source = listed().find((t) => t.id === task.origin.taskId);
  const of = source ? `"${source.goal}"` : "a task not listed";
  return `fork of ${of} at event ${task.origin.seq} · created ${created}`;
}

function percent(done, total) {
  return total ? Math.round((100 * done) / total) : 0;
}

function finishedSteps(steps) {
  return steps.filter((s) => FINISHED.has(s.status)).length;
}

function nodesRun(done) {
  return `${done} node${done === 1 ? "" : "s"} run`;
}

// What waits for a person, on this task or another, wherever the page says it: the
// header, the title, and the session list, drawn again when the followed task
// changed since it was drawn.
function markNeeds() {
  if (current && current.task && listKey(known(current.task)) !== listedAs) showList();
  const waiting = listed().map(known).filter(needsYou);
  const here = current && current.task && current.task.steps.some((s) => s.status === "IN_DOUBT");
  const count = new Set([...waiting.map((t) => t.id), ...(here ? [current.id] : [])]).size;
  $("needs").hidden = count === 0;
  if (count) {
    $("needs").textContent = count === 1 ? "1 task needs you" : `${count} tasks need you`;
    $("needs").href = "#task=" + encodeURIComponent(here ? current.id : waiting[0].id);
  }
  const goal = current && current.task ? current.task.goal : null;
  document.title = (count ? `(${count}) Decision needed · ` : "") + (goal ? goal + " · " : "") + "runstate";
}

// Opened on no task in particular, the page follows the newest active task (of one
// session with #session=, as the demo's link says: its own trips, not an earlier
// run's), and moves on only once the task it shows is finished. In a session with
// a ledger, the active task is the one whose turn it is, not a newer queued one:
// the page waits for the session's ledger before it picks. The address it writes
// says it follows (#follow&task=, #session=...&task=), so that a link to the task
// shown, clicked, is a choice of it like any other (route).
function follow() {
  if (!following || (current && current.past)) return;
  if (followedSession !== null && !(ledger && ledger.session === followedSession && ledger.known)) return;
  const sessions = followedSession === null ? sessionsRead : sessionsRead.filter((s) => s.id === followedSession);
  const tasks = sessions.flatMap((s) => s.tasks.edges.map((e) => ({ ...e.node, session: s })));
  const active = turn() ?? tasks.find((t) => moving(t, t.session));
  const finished = !current || !current.task || FINAL.has(current.task.status);
  const next = active || (!current ? tasks[0] : null);
  if (!next) { if (!current) showEmpty(); return; }
  if (current && current.id === next.id) return;
  if (!current || finished) {
    const followed = followedSession === null ? FOLLOW : "session=" + encodeURIComponent(followedSession);
    history.replaceState(null, "", "#" + followed + "&task=" + encodeURIComponent(next.id));
    select(next.id);
  }
}

// Whether anyone may still move an unfinished task on: a person (it waits for a
// decision), its agent (working, its lease not lapsed), or a worker that claims it
// (no live lease, in an open session, and no LangGraph thread: only its graph goes
// on with one). A task nobody will move (a trip an earlier run left behind) is never
// followed, however new.
function moving(task, session) {
  if (FINAL.has(task.status)) return false;
  if (needsYou(task) || (AGENT_STATUSES.has(task.status) && !task.stalled)) return true;
  return !CLOSED_SESSIONS.has(session.status) && !task.graphThread;
}

function showEmpty() {
  $("task").hidden = true;
  $("empty").hidden = false;
  $("empty-session").hidden = followedSession === null;
  $("empty-any").hidden = followedSession !== null; // a run of its own: nothing to start
  $("empty-session-id").textContent = followedSession ?? "";
  watchLedger();
}

// ------------------------------------------------------------- one task, live

function route() {
  const params = new URLSearchParams(location.hash.slice(1));
  const taskId = params.get("task");
  followedSession = params.get("session");
  // A task the person chose (a link to it, a click on it) holds until they choose
  // another: the page follows only while they chose none, or chose a session.
  following = !taskId || followedSession !== null || params.has(FOLLOW);
  // A session opened from the list: a task of another session is no longer shown.
  if (!taskId && followedSession !== null && current && current.task &&
      current.task.sessionId !== followedSession) leaveTask();
  if (taskId && (!current || current.id !== taskId)) select(taskId);
  if (!taskId) follow();
  watchLedger();
}

// A person who acted on the task shown (decided a step, answered a question) chose
// it: the page holds it, so they see what came of it, until they choose another.
function chosen(taskId) {
  if (!following) return;
  history.replaceState(null, "", "#task=" + encodeURIComponent(taskId));
  route();
}

function leaveTask() {
  clearTimeout(current.leaseTimer);
  clearTimeout(current.spendTimer);
  current = null;
  if (socket) { const old = socket; socket = null; old.close(); }
  setConnection("idle", "not connected");
  $("task").hidden = true;
}

function select(taskId) {
  if (current) { clearTimeout(current.leaseTimer); clearTimeout(current.spendTimer); }
  current = { id: taskId, task: null, lastSeq: null, epoch: null, entries: [], told: 0, holes: new Set(),
    doubts: {}, runs: {}, leases: {}, released: null, letGo: {},
    ttls: {}, leaseTimer: null, graph: false,
    pending: null, past: null, source: null, spent: null, spendTimer: null };
  scrubTo = null;
  $("empty").hidden = true;
  $("missing").hidden = true;
  $("task").hidden = false;
  $("past").hidden = true;
  $("decision").hidden = true;
  $("events").replaceChildren();
  $("complete-output").value = "";
  $("decision-why").value = "";
  $("decision-result").textContent = "";
  $("raise-result").textContent = "";
  $("raise-why").value = "";
  for (const link of document.querySelectorAll("#task-list a[data-task]")) {
    link.classList.toggle("current", link.dataset.task === taskId);
  }
  connect();
  renderLedger(); // marks the entry of the task shown
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
  ws.onmessage = async (message) => {
    const msg = JSON.parse(message.data);
    if (msg.type === "connection_ack") {
      retryDelay = 500;
      setConnection("live", "live");
      const query = (await DOCUMENTS).pageProgress.body;
      ws.send(JSON.stringify({ id: "1", type: "subscribe", payload: {
        // No afterSeq on the first subscription: a SNAPSHOT, then live deltas. Its
        // epoch says which timeline the seq is of: after a restore, a SNAPSHOT again.
        query, variables: { taskId: watching.id, afterSeq: watching.lastSeq,
          epoch: watching.epoch } } }));
    } else if (msg.type === "next") {
      if (msg.payload.errors) refused(watching, msg.payload.errors[0].message);
      else onEvent(watching, msg.payload.data.taskProgress);
    } else if (msg.type === "ping") {
      ws.send(JSON.stringify({ type: "pong" }));
    } else if (msg.type === "error") {
      refused(watching, msg.payload[0].message);
    }
  };
  ws.onclose = (event) => {
    if (socket !== ws) return;
    socket = null;
    if (event.code === 4403) { signOut("This page's token was refused. Sign in again."); return; }
    // 4029: this user holds as many connections as the server allows (other tabs).
    setConnection("reconnecting", event.code === 4029 ? "too many open pages; trying again…" : "reconnecting…");
    setTimeout(connect, retryDelay);
    retryDelay = Math.min(retryDelay * 2, 5000);
  };
}

// A subscription the server ended with an error. A task this token cannot see (an
// unknown id, or one of another user's, which answer alike) is said plainly, with
// no empty task drawn under it.
function refused(watching, message) {
  if (watching !== current) return;
  if (/ not found$/.test(message) && !watching.task) {
    $("task").hidden = true;
    $("missing").hidden = false;
    $("missing-text").textContent = `There is no task "${watching.id}" for this token: it may have ` +
      "been deleted with its session, or belong to another user. Pick one from the list.";
    setConnection("error", "no such task");
    return;
  }
  setConnection("error", message);
}

function onEvent(watching, event) {
  if (watching !== current) return;
  // A SNAPSHOT is taken whatever its seq: a restored database's history is shorter.
  if (event.kind !== "SNAPSHOT" && watching.lastSeq !== null && event.seq <= watching.lastSeq) return;
  watching.lastSeq = event.seq;
  watching.epoch = event.epoch;
  if (event.kind === "SNAPSHOT") {
    watching.task = event.task;
    noteLease(watching, event.task.lock, ms(event.at), true);
    watching.pending = [];
    watching.holes = new Set(); // the log is told again, its holes found again
    loadLog(watching, event);
    watchLedger(); // the task's session, known now
  } else if (watching.pending) {
    // Shown now, told in the log once the events before it are (loadLog).
    watching.task = applyEvent(watching.task, event);
    watching.pending.push(event);
  } else {
    watching.task = record(watching, watching.task, event);
    renderLog(watching);
  }
  render();
  markNeeds();
  if (LEASE_EVENTS.has(event.kind)) nextLeaseRead(watching);
  nextSpendRead(watching);
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
    stalled: event.stalled, steps, toolStates, totalSteps: steps.length,
    currentStep: unfinished === -1 ? steps.length : unfinished,
    lock: LEASE_EVENTS.has(event.kind) ? event.lock : task.lock,
    interruptRequested: task.interruptRequested || event.kind === "INTERRUPT_REQUESTED",
    budget: event.kind === "BUDGET_CHANGED" ? event.budget : task.budget };
}

// The log: the newest events up to the snapshot, each told against the task as it
// stood just before it (taskAt of the seq before the first one shown), then the
// events that came live meanwhile. Told in seq order, so a step decided while the
// log loads keeps the time its decision took; a seq the log lacks is told as missing.
async function loadLog(watching, snapshot) {
  const pending = watching.pending;
  const from = Math.max(0, snapshot.seq - LOG_LINES);
  const older = [];
  let told = from; // the log tells what follows this seq
  let task = EMPTY_TASK;
  try {
    if (from > 0) task = (await pastAt(watching, from)).task;
    // Paged by the last seq read: after a hole, a page's events reach past its end.
    for (let after = from; after < snapshot.seq;) {
      const first = Math.min(PAGE, snapshot.seq - after);
      const data = await graphql("pageLog", { id: watching.id, after, first });
      if (watching !== current) return;
      const events = data.task.events;
      older.push(...events.filter((e) => e.seq <= snapshot.seq)); // later ones came live
      if (events.length < first) break;
      after = events[events.length - 1].seq;
    }
  } catch (error) {
    console.warn("event log:", error.message);
    older.length = 0; // a log it could not read: it starts at the snapshot instead
    told = snapshot.seq;
  }
  if (watching !== current || watching.pending !== pending) return; // left, or a newer snapshot
  watching.pending = null;
  watching.entries = [];
  watching.told = told;
  watching.doubts = {};
  for (const event of older) task = record(watching, task, event);
  missingUpTo(watching, snapshot.seq);
  task = snapshot.task;
  for (const event of pending) task = record(watching, task, event);
  renderLog(watching);
  render();
  nextLeaseRead(watching);
}

// A seq the log lacks though the task's eventSeq passed it: a server's fault (a
// write that counted an event it never stored). The log and the history slider say
// so where they reach it, rather than step over it as if its neighbours were one
// event apart.
const missingText = (seq) => `seq ${seq} is missing from this task's log`;

// An entry for each seq after the last one the log told, up to `seq`: none of them
// came, so each is missing.
function missingUpTo(watching, seq) {
  for (let missing = watching.told + 1; missing <= seq; missing++) {
    watching.holes.add(missing);
    watching.entries.push({ seq: missing, at: null, kind: "MISSING", who: null, subject: "the log",
      text: missingText(missing), delta: { seq: missing, stored: false } });
    if (watching.entries.length > LOG_LINES) watching.entries.shift();
  }
  watching.told = Math.max(watching.told, seq);
}

// One log entry for `event`, and what it means for a step's decision time; the
// task as of `event`.
function record(watching, before, event) {
  missingUpTo(watching, event.seq - 1);
  watching.told = event.seq;
  const after = applyEvent(before, event);
  heard(watching, before, event);
  for (const step of event.steps) {
    const was = before.steps[step.index];
    if (step.status === "IN_DOUBT" && (!was || was.status !== "IN_DOUBT")) {
      watching.doubts[step.index] = doubtOf(watching, watching.runs[step.index], before, event);
    } else if (was && was.status === "IN_DOUBT" && step.status !== "IN_DOUBT" && watching.doubts[step.index]) {
      watching.doubts[step.index].decided = event.at;
    }
  }
  if (event.kind.startsWith("GRAPH_")) watching.graph = true; // a LangGraph thread's
  if (LEASE_EVENTS.has(event.kind)) {
    noteLease(watching, event.lock, ms(event.at), false);
    if (event.kind === "LOCK_ACQUIRED") {
      // A new lease (its holder's extension keeps the token): a takeover.
      if (!before.lock || before.lock.fencingToken !== event.lock.fencingToken) watching.takenOver = event.at;
      watching.released = null;
      delete watching.letGo[event.lock.holderId];
      watching.ttls[event.lock.holderId] = ms(event.lock.expiresAt) - ms(event.at);
    } else {
      const holder = before.lock ? before.lock.holderId : null;
      watching.released = { holder, at: event.at };
      if (holder) watching.letGo[holder] = event.at;
      for (const doubt of Object.values(watching.doubts)) {
        if (doubt.own && doubt.holder === holder && !doubt.released) doubt.released = event.at;
      }
    }
  }
  // Who wrote it: the lease holder for a write under a lease, else the user; a lease
  // event's sentence names its agent already.
  const who = LEASE_EVENTS.has(event.kind) ? null : event.holder ?? event.actor;
  watching.entries.push({ seq: event.seq, at: event.at, kind: event.kind, who,
    subject: subject(before, event), text: describe(before, after, event), delta: delta(event) });
  if (watching.entries.length > LOG_LINES) watching.entries.shift();
  return after;
}

// Each holder's lease as last seen (lease events, the snapshot, this page's own
// reads; renewals write no event), and when: a later sighting replaces an earlier
// one, longer or shorter (a task created leased for a minute is taken over by its
// agent's five-second lease). `read`: the server's lease as it stood (the snapshot,
// a read), not as an event granted it, renewals since unknown.
function noteLease(watching, lock, seen, read) {
  if (!lock) return;
  const known = watching.leases[lock.holderId];
  if (!known || seen >= known.seen) watching.leases[lock.holderId] = { expiresAt: lock.expiresAt, seen, read };
}

// A step just found IN_DOUBT, as its `run` (RUNNING since, under whose lease) left
// it. Put in doubt under the lease it ran under, by its holder (an OpenAI Agents
// run asking for approval), it is no crash: `own`, and the lease's release is told
// when it comes. Else its agent stopped: it let the task go (`letGo`, a release the
// log holds since the agent was last heard of, as Ctrl-C in a runner writes), or
// its lease lapsed: when, only if this
// page read that lease (renewals write no event, so a lease's end as granted says
// nothing of a lease renewed since, shorter or longer), the agent was not heard of
// after it, and it is not after the takeover (the first new lease since); otherwise
// the page says the lease lapsed before the takeover, as the log shows it.
function doubtOf(watching, run, before, event) {
  const holder = run && run.holder ? run.holder : null;
  const heard = holder ? run.heard : null;
  const own = holder !== null && event.holder === holder && before.lock !== null &&
    before.lock.fencingToken === run.token;
  const end = holder && !own ? watching.leases[holder] : null;
  const gone = holder && !own ? watching.letGo[holder] : null;
  const letGo = gone && heard && ms(gone) >= ms(heard) ? gone : null;
  const after = watching.takenOver && heard && ms(watching.takenOver) >= ms(heard);
  const takenOver = after ? watching.takenOver : null;
  const known = end && end.read && ms(end.expiresAt) >= ms(heard) &&
    (!takenOver || ms(end.expiresAt) <= ms(takenOver));
  return { since: event.at, decided: null, heard, holder, own, released: null, letGo,
    lapsed: known && !letGo ? end.expiresAt : null, takenOver };
}

// When each running step's agent was last heard of: the step's start, then every
// write under the lease that started it (its tool calls, its other steps). A step
// found IN_DOUBT ran until then at most: the time its dead agent's lease took to
// lapse, and a worker to take over, is not running time.
function heard(watching, before, event) {
  for (const step of event.steps) {
    const was = before.steps[step.index];
    if (step.status === "RUNNING" && (!was || was.status !== "RUNNING")) {
      const token = event.holder && before.lock ? before.lock.fencingToken : null;
      watching.runs[step.index] = { holder: event.holder, heard: event.at, token };
    } else if (step.status !== "RUNNING") {
      if (step.status !== "IN_DOUBT") delete watching.runs[step.index];
    }
  }
  if (!event.holder) return;
  for (const [index, run] of Object.entries(watching.runs)) {
    if (run.holder === event.holder && before.steps[index]?.status === "RUNNING") run.heard = event.at;
  }
}

// What an event is about, for grouping the log: its step, or for a tool call the
// step running when it was made; the lease; else the task.
function subject(before, event) {
  const step = event.stepIndex ?? (event.toolState ? before.steps.find((s) => s.status === "RUNNING")?.index : null);
  if (step !== null && step !== undefined) {
    const known = before.steps[step] || event.steps.find((s) => s.index === step);
    return known ? stepName(known) : "step " + step;
  }
  if (event.toolName) return event.toolName;
  if (LEASE_EVENTS.has(event.kind)) return "lease";
  return "task";
}

function delta(event) {
  const shown = { seq: event.seq, kind: event.kind, status: event.status, taskVersion: event.taskVersion,
    actor: event.actor };
  if (event.holder) shown.holder = event.holder;
  if (event.note) shown.note = event.note;
  if (event.steps.length) shown.steps = event.steps;
  if (event.toolState) shown.toolState = event.toolState;
  if (LEASE_EVENTS.has(event.kind)) shown.lock = event.lock;
  return shown;
}

// The steps an event moved, one sentence per move: "step 3 book flight: RUNNING ->
// IN_DOUBT (timeout)". A step the event added as it started it (a LangGraph node's
// first run) moved from PENDING; steps moved alike with nothing more to say are named
// together: "steps 1 search_flights, 2 search_hotels: PENDING -> RUNNING".
function moves(before, event) {
  const said = []; // { move, steps, more }, in the event's order
  for (const step of event.steps) {
    const was = before.steps[step.index] ?? (step.status === "RUNNING" ? { status: "PENDING" } : null);
    if (!was || was.status === step.status) continue;
    const move = `${was.status} -> ${step.status}`;
    let more = "";
    if (step.status === "FAILED" && step.error) more = ` (${step.error})`;
    if (step.status === "RUNNING" && step.attempts > 1) more = ` (attempt ${step.attempts})`;
    const alike = more ? null : said.find((s) => s.move === move && !s.more);
    if (alike) alike.steps.push(step);
    else said.push({ move, steps: [step], more });
  }
  return said.map(({ move, steps, more }) => steps.length === 1 ? `${stepName(steps[0])}: ${move}${more}`
    : `steps ${steps.map((s) => `${s.index} ${s.action}`).join(", ")}: ${move}`);
}

// An event as a sentence: "agent-14182 took over (lease 3)", "hotel-api rate-limited
// until 10:41:05", "step 3 book flight: RUNNING -> IN_DOUBT".
function describe(before, after, event) {
  const parts = [];
  if (event.kind === "TASK_CREATED") parts.push(`task created with ${after.steps.length} steps`);
  if (event.kind === "STEPS_ADDED") {
    const added = event.steps.filter((s) => !before.steps[s.index]);
    parts.push(`${added.length} step${added.length === 1 ? "" : "s"} added: ${added.map((s) => s.action).join(", ")}`);
  }
  if (event.kind === "LOCK_ACQUIRED" && event.lock) {
    const was = before.lock;
    const lease = `(lease ${event.lock.fencingToken})`;
    parts.push(!was ? `${event.lock.holderId} took the task ${lease}`
      : was.holderId === event.lock.holderId ? `${event.lock.holderId} took the task again ${lease}`
        : `${event.lock.holderId} took over from ${was.holderId} ${lease}`);
  }
  if (event.kind === "LOCK_RELEASED") parts.push(`${before.lock ? before.lock.holderId : "the agent"} let the task go`);
  if (event.toolState) parts.push(toolSentence(event.toolState));
  if (event.kind === "TASK_CREATED" && after.origin) parts.push(`forked from event ${after.origin.seq} of ${after.origin.taskId}`);
  const decided = event.steps.find((s) => before.steps[s.index]?.status === "IN_DOUBT" && s.status !== "IN_DOUBT");
  if (event.kind === "INTERRUPT_ANSWERED") {
    const step = event.steps[0];
    parts.push(`${event.actor ?? "someone"} answered ${stepName(step)}: ${json(step.output.answer)}` +
      (event.note ? ` (${event.note})` : ""));
  } else if (decided) {
    parts.push(`${event.actor ?? "someone"} decided: ${DECISIONS[decided.status] ?? words(decided.status)}` +
      (event.note ? ` (${event.note})` : ""));
  } else if (event.kind === "INTERRUPT_REQUESTED") {
    parts.push("asked to stop at its next step" + (event.note ? `: ${event.note}` : ""));
  } else if (event.note && event.kind !== "BUDGET_CHANGED") parts.push(`${event.actor ?? "someone"} said: ${event.note}`);
  if (event.kind === "BUDGET_CHANGED") {
    parts.push(`${event.actor ?? "someone"} ${event.budget ? "set the budget to " + limits(event.budget) : "removed the budget"}` +
      (event.note ? ` (${event.note})` : ""));
  }
  for (const step of event.steps) {
    const was = before.steps[step.index];
    const added = spentBetween(was ? was.spend : null, step.spend);
    if (added) parts.push(`${stepName(step)} spent ${added}`);
  }
  if (event.budgetCrossed) {
    parts.push(`${event.budgetCrossed === "TASK" ? "its" : "its session's"} budget is spent: no new work`);
  }
  if (event.kind !== "TASK_CREATED" && event.kind !== "STEPS_ADDED") parts.push(...moves(before, event));
  if (before.status !== after.status && event.kind !== "TASK_CREATED") {
    parts.push(`task: ${before.status} -> ${after.status}`);
  }
  if (!parts.length) parts.push(event.kind === "CHECKPOINT" ? "checkpoint, nothing changed" : words(event.kind));
  return parts.join("; ");
}

const DECISIONS = { PENDING: "retry", SKIPPED: "skip", SUCCESS: "it happened" };

// ------------------------------------------------------------- spend and budgets

const NO_SPEND = { inputTokens: 0, outputTokens: 0, costMicros: 0, calls: 0 };
const count = (n) => n.toLocaleString();

/** The fewest decimals, 2 to 6, that show `micros` (millionths) exactly: in whole
 * cents, $0.024 spent of a $0.02 budget read "$0.02 of $0.02". */
function decimals(micros) {
  let digits = 2;
  while (digits < 6 && micros % 10 ** (6 - digits) !== 0) digits++;
  return digits;
}

/** Millionths of the deployment's currency as money, exactly: "$4.10", "$0.0051". */
function money(micros) {
  const currency = (current && current.spent && current.spent.currency) || "USD";
  const digits = decimals(micros);
  return new Intl.NumberFormat(undefined, { style: "currency", currency,
    minimumFractionDigits: digits, maximumFractionDigits: digits }).format(micros / 1e6);
}

/** Whether a spend counts anything: a report of no tokens and no cost does not. */
function anySpent(spend) {
  return spend.inputTokens + spend.outputTokens + spend.costMicros > 0;
}

/** "1,540 tokens · $0.0051": what a spend adds up to, shown in words. */
function spentText(spend) {
  const tokens = spend.inputTokens + spend.outputTokens;
  return `${count(tokens)} token${tokens === 1 ? "" : "s"} · ${money(spend.costMicros)}`;
}

/** What a step's spend grew by in one event, in words (null: nothing). */
function spentBetween(before, after) {
  if (!after || !after.calls || (before && before.calls === after.calls)) return null;
  const was = before || NO_SPEND;
  const added = { inputTokens: after.inputTokens - was.inputTokens,
    outputTokens: after.outputTokens - was.outputTokens, costMicros: after.costMicros - was.costMicros };
  return anySpent(added) ? spentText(added) : null;
}

/** A cost and a count of tokens in the units a budget limits: "$4.00", "50,000
 * tokens", or both; the cost with the decimals that show it exactly. */
function inUnitsOf(budget, costMicros, tokens) {
  const parts = [];
  if (budget.maxCostMicros !== null) parts.push(money(costMicros));
  if (budget.maxTokens !== null) parts.push(`${count(tokens)} tokens`);
  return parts.join(" and ");
}

/** A budget's limits in words. */
function limits(budget) {
  return inUnitsOf(budget, budget.maxCostMicros, budget.maxTokens);
}

/** What was spent, in the units of the budget's limits. */
function spentOf(spend, budget) {
  return inUnitsOf(budget, spend.costMicros, spend.inputTokens + spend.outputTokens);
}

/** The share of a budget spent (1: reached), by whichever limit is nearer. */
function used(spend, budget) {
  const shares = [];
  if (budget.maxCostMicros !== null) shares.push(budget.maxCostMicros ? spend.costMicros / budget.maxCostMicros : 1);
  if (budget.maxTokens !== null) {
    shares.push(budget.maxTokens ? (spend.inputTokens + spend.outputTokens) / budget.maxTokens : 1);
  }
  return Math.max(0, ...shares);
}

function sumSpend(steps) {
  return steps.reduce((total, step) => {
    const spend = step.spend || NO_SPEND;
    return { inputTokens: total.inputTokens + spend.inputTokens, outputTokens: total.outputTokens + spend.outputTokens,
      costMicros: total.costMicros + spend.costMicros, calls: total.calls + spend.calls };
  }, NO_SPEND);
}

// "stopped: spent $4.10 of its $4.00 budget": the budget that stops new work, if any.
// The task's own is judged here, from its steps; its session's from the last read
// of the session (pageSpend), since other tasks spend it too.
function stoppedBy(task, spend) {
  if (FINAL.has(task.status)) return null; // nothing left to start
  if (task.budget && used(spend, task.budget) >= 1) {
    return { scope: "TASK", budget: task.budget, spend, version: task.version,
      text: `stopped: spent ${spentOf(spend, task.budget)} of its ${limits(task.budget)} budget` };
  }
  const session = current.spent && current.spent.session;
  if (session && session.budget && used(session.spend, session.budget) >= 1) {
    return { scope: "SESSION", budget: session.budget, spend: session.spend, version: session.version,
      text: `stopped: its session spent ${spentOf(session.spend, session.budget)} of its ` +
        `${limits(session.budget)} budget` };
  }
  return null;
}

function renderSpend(task, live) {
  const spend = sumSpend(task.steps);
  const session = current.spent && current.spent.session;
  const budget = task.budget || (session && session.budget) || null;
  $("spend").hidden = !anySpent(spend) && !budget;
  if ($("spend").hidden) return;
  $("spend-text").textContent = anySpent(spend)
    ? `Spent ${spentText(spend)} (${count(spend.inputTokens)} in, ${count(spend.outputTokens)} out) ` +
      `in ${spend.calls} report${spend.calls === 1 ? "" : "s"}.`
    : "Nothing spent yet.";
  const shown = task.budget ? { spend, budget: task.budget, whose: "its" }
    : session && session.budget ? { spend: session.spend, budget: session.budget, whose: "its session's" } : null;
  $("budget-track").hidden = !shown;
  $("budget-text").hidden = !shown;
  if (shown) {
    const share = used(shown.spend, shown.budget);
    $("budget-bar").style.width = Math.min(100, share * 100) + "%";
    $("budget-bar").dataset.over = String(share >= 1);
    $("budget-text").textContent = `${spentOf(shown.spend, shown.budget)} of ${shown.whose} ` +
      `${limits(shown.budget)} budget`;
  }
  const stop = live ? stoppedBy(task, spend) : null;
  $("over-budget").hidden = !stop;
  $("raise-form").hidden = !stop;
  if (!stop) return;
  $("over-budget").textContent = stop.text;
  const form = $("raise-form");
  if (form.dataset.for !== stop.scope + ":" + stop.version) {
    form.dataset.for = stop.scope + ":" + stop.version;
    form.dataset.scope = stop.scope;
    form.dataset.version = stop.version;
    // The limit that stopped the work: cost when it is reached, else tokens.
    const byCost = stop.budget.maxCostMicros !== null && stop.spend.costMicros >= stop.budget.maxCostMicros;
    form.dataset.unit = byCost ? "cost" : "tokens";
    $("raise-label").textContent = `New ${stop.scope === "TASK" ? "task" : "session"} budget ` +
      `(${byCost ? current.spent?.currency ?? "USD" : "tokens"}):`;
    const limit = byCost ? stop.budget.maxCostMicros / 1e6 : stop.budget.maxTokens;
    $("raise-amount").value = String(Math.max(limit * 2, byCost ? 1 : 1000));
  }
}

function nextSpendRead(watching) {
  clearTimeout(watching.spendTimer);
  watching.spendTimer = setTimeout(() => checkSpend(watching), SPEND_READ_MS);
}

async function checkSpend(watching) {
  try {
    const data = await graphql("pageSpend", { id: watching.id });
    if (watching !== current || !data.task || data.task.version === undefined) return;
    watching.spent = { currency: data.usage.currency, overBudget: data.task.overBudget,
      session: data.task.session };
    if (watching.task && !watching.past) render();
  } catch (error) {
    if (!(error instanceof Refused)) console.warn("spend:", error.message);
  }
}

// A person's raise, as setBudget at the version the page shows: the limit that
// stopped the work set to the amount typed in, the other kept.
async function raiseBudget(event) {
  event.preventDefault();
  const watching = current;
  const form = $("raise-form");
  const amount = Number($("raise-amount").value);
  if (!watching || !watching.task || !(amount >= 0)) return;
  const task = watching.task;
  const session = watching.spent && watching.spent.session;
  const scope = form.dataset.scope;
  const was = scope === "TASK" ? task.budget : session.budget;
  const budget = { maxTokens: was.maxTokens, maxCostMicros: was.maxCostMicros };
  if (form.dataset.unit === "cost") budget.maxCostMicros = Math.round(amount * 1e6);
  else budget.maxTokens = Math.round(amount);
  const input = { expectedVersion: Number(form.dataset.version), budget };
  if (scope === "TASK") input.taskId = task.id; else input.sessionId = session.id;
  const why = $("raise-why").value.trim();
  if (why) input.note = why;
  $("raise-result").textContent = "…";
  try {
    const problem = (await graphql("pageBudget", { input })).setBudget.message;
    $("raise-result").textContent = problem ?? "";
    if (!problem) $("raise-why").value = "";
    checkSpend(watching);
  } catch (error) {
    $("raise-result").textContent = error.message;
  }
}

function toolSentence(tool) {
  if (tool.rateLimitResetAt && tool.status === "RETRYING") {
    return `${tool.toolName} rate-limited until ${clock(tool.rateLimitResetAt)}`;
  }
  if (tool.status === "CALLING") return `${tool.toolName} called`;
  if (tool.status === "SUCCESS") return `${tool.toolName} answered`;
  if (tool.status === "RETRYING") return `${tool.toolName} failed (${tool.lastError ?? "no reason given"}), retry ${tool.retryCount} of ${tool.maxRetries}`;
  if (tool.status === "FAILED") return `${tool.toolName} failed for good: ${tool.lastError ?? "no reason given"}`;
  return `${tool.toolName}: ${words(tool.status)}`;
}

// Newest first, consecutive events about one thing (a step and its tool calls,
// the lease, the task) grouped; each sentence opens to the delta the server sent.
function renderLog(watching) {
  const open = new Set([...$("events").querySelectorAll("details[open]")].map((d) => d.dataset.seq));
  const groups = [];
  for (const entry of watching.entries.slice().reverse()) {
    const last = groups[groups.length - 1];
    if (last && last.subject === entry.subject) last.entries.push(entry);
    else groups.push({ subject: entry.subject, entries: [entry] });
  }
  $("events").replaceChildren(...groups.map((group) => el("li", { class: "group" },
    el("div", { class: "group-head" }, group.subject,
      el("span", {}, clock(group.entries[group.entries.length - 1].at))),
    el("ol", {}, group.entries.map((entry) => el("li", { "data-seq": entry.seq, class: "k-" + entry.kind },
      el("details", { "data-seq": entry.seq, open: open.has(String(entry.seq)) },
        el("summary", {}, el("span", { class: "when" }, clock(entry.at)), " ", entry.text,
          entry.who ? el("span", { class: "who" }, " · by " + entry.who) : null),
        el("pre", {}, JSON.stringify(entry.delta, null, 2)))))))));
}

// ------------------------------------------------------------- drawing the task

function shown() {
  return current && (current.past ? current.past.task : current.task);
}

function render() {
  const task = shown();
  if (!task) return;
  const now = Date.now();
  const live = !current.past;
  const done = finishedSteps(task.steps);
  const pct = percent(done, task.totalSteps);
  $("task").dataset.seq = task.eventSeq;
  $("goal").textContent = task.goal;
  $("status").textContent = words(task.status);
  $("status").className = "badge s-" + task.status;
  // A LangGraph thread's steps are its node runs, added as the graph runs them: a
  // share of a plan it does not have would grow and shrink as nodes appear. While
  // its graph runs (live, not in the history), the bar moves: it has no end to show.
  const graph = current.graph;
  const busy = graph && live && task.status === "RUNNING";
  $("bar").toggleAttribute("data-busy", busy);
  $("bar").style.width = (graph ? (FINAL.has(task.status) || busy ? 100 : 0) : pct) + "%";
  $("percent").textContent = graph ? nodesRun(done) : pct + "%";
  $("counts").textContent = graph ? "a LangGraph thread" : `${done} of ${task.totalSteps} steps done`;
  $("version").textContent = task.version;
  renderOrigin(task);
  renderLease(task, now, live);
  $("stopping").hidden = !task.interruptRequested || FINAL.has(task.status);
  renderSpend(task, live);
  renderDecision(live ? task : null, now);
  renderInterrupt(live ? task : null);
  renderSteps(task, now, live);
  renderTools(task, now, live);
  renderScrubber();
}

// "Forked from <its source's goal> at event N", a link to the source.
function renderOrigin(task) {
  const origin = task.origin;
  $("origin").hidden = !origin;
  if (!origin) return;
  const watching = current;
  if (!watching.source || watching.source.id !== origin.taskId) {
    watching.source = { id: origin.taskId, goal: null };
    graphql("pageGoal", { id: origin.taskId }).then((data) => {
      watching.source.goal = data.task.__typename === "Task" ? data.task.goal : "a task since deleted";
      if (watching === current) render();
    }).catch((error) => console.warn("fork source:", error.message));
  }
  const goal = watching.source.goal ?? origin.taskId;
  $("origin").replaceChildren("Forked from ",
    el("a", { href: "#task=" + encodeURIComponent(origin.taskId), "data-testid": "origin-link" }, goal),
    ` at event ${origin.seq}.`);
}

// The lease as it is now: its holder and when it runs out, or that it lapsed and
// no agent is left. The server's `stalled` says so at once. The page's clock passing
// the lease it last read does not: the agent may have renewed it since that read.
// The lease is then due, and read again each second; a renewed lease or `stalled`
// settles it, and only if no answer comes within LEASE_GRACE_MS does the clock.
function lapsed(task, now) {
  if (!AGENT_STATUSES.has(task.status)) return false;
  return task.stalled || (task.lock !== null && now - ms(task.lock.expiresAt) >= LEASE_GRACE_MS);
}

function due(task, now) {
  return AGENT_STATUSES.has(task.status) && task.lock !== null && !held(task.lock, now) &&
    !lapsed(task, now);
}

// With no agent, why: a budget spent (claims pass over the task until it is
// raised), its agent letting it go (a LOCK_RELEASED event, told at its time), or
// its lease lapsing.
function renderLease(task, now, live) {
  const lock = task.lock;
  const agent = $("agent");
  const gone = live && lapsed(task, now);
  const stop = gone ? stoppedBy(task, sumSpend(task.steps)) : null;
  const released = gone && !lock ? current.released : null;
  agent.hidden = FINAL.has(task.status) || (!lock && !gone);
  agent.className = "badge " + (gone ? "s-STALLED" : "s-RUNNING");
  agent.textContent = !gone ? (lock ? lock.holderId : "")
    : stop ? "no agent: budget spent" : released ? "no agent: lease released" : "no agent: lease lapsed";
  const left = released ? `${released.holder ?? "its agent"} let the task go at ${clock(released.at)}`
    : lock ? `the lease of ${lock.holderId} (lease ${lock.fencingToken}) lapsed ${seconds(now - ms(lock.expiresAt))} ago`
      : "its lease lapsed";
  let text;
  if (!live) text = lock ? `${lock.holderId} held the lease (lease ${lock.fencingToken})` : "no lease";
  else if (gone && stop) {
    text = `No agent: stopped by ${stop.scope === "TASK" ? "its" : "its session's"} budget; ${left}. ` +
      "claimTask passes over it until the budget is raised.";
  } else if (gone) text = `No agent: ${left}. A worker calling claimTask takes it over.`;
  else if (held(lock, now)) {
    text = `${lock.holderId} holds the lease (lease ${lock.fencingToken}); it runs out in ` +
      `${seconds(ms(lock.expiresAt) - now)} unless the agent renews it.`;
  } else if (due(task, now)) {
    text = `${lock.holderId} held the lease (lease ${lock.fencingToken}) until ` +
      `${seconds(now - ms(lock.expiresAt))} ago: asking the server whether it was renewed.`;
  } else if (current.graph) {
    text = FINAL.has(task.status) ? "" : "This LangGraph thread runs without a lease: its " +
      "RunstateSaver was made without holder=, so no agent is named here (with holder=, " +
      "each thread is leased to its graph's process).";
  } else if (task.status === "AWAITING_DECISION") {
    text = "No agent holds the lease: the task waits for a person's decision.";
  } else text = FINAL.has(task.status) ? "" : "No agent holds the lease.";
  $("lease").textContent = text;
  $("lease").dataset.state = gone ? "lapsed" : held(lock, now) ? "held" : due(task, now) ? "due" : "none";
}

function renderDecision(task, now) {
  const inDoubt = task ? task.steps.find((s) => s.status === "IN_DOUBT") : null;
  $("decision").hidden = !inDoubt;
  if (!inDoubt) return;
  $("decision").dataset.step = inDoubt.index;
  const approval = asksApproval(task, inDoubt);
  const call = approval ? inDoubt.action.slice("approve ".length) : null; // "send_mail({...})"
  $("question").textContent = approval
    ? `Step ${inDoubt.index}: the agent asks to call ${call}. ` +
      "Approve it, and the agent's next run calls it once; reject it, and the agent is told your reason."
    : `Step ${inDoubt.index} "${inDoubt.action}" was running when its ` +
      "agent stopped, and it is not safe to run twice. Did it happen?";
  $("retry").textContent = approval ? "Approve the call" : "It did not happen: retry it";
  $("skip").textContent = approval ? "Reject it" : "Skip it and go on";
  $("complete-form").hidden = approval;
  $("decision-why").placeholder = approval
    ? `e.g. why ${call.split("(")[0]} may, or may not, be called`
    : `e.g. how you know whether "${inDoubt.action}" happened`;
  $("complete-output").placeholder = `What "${inDoubt.action}" produced, e.g. {"reference": "…"}`;
  // While an agent holds a live lease the server refuses anyone else's write.
  const waiting = held(task.lock, now);
  $("decision-note").hidden = !waiting;
  if (waiting) {
    $("decision-note").textContent = `${task.lock.holderId} still holds the task for ` +
      `${seconds(ms(task.lock.expiresAt) - now)}: a decision is refused until it lets go or its lease runs out.`;
  }
}

// An OpenAI Agents run stopped at a tool that needs approval (integrations.openai_agents):
// retry approves the call, skip rejects it; nothing has happened to mark done, and
// no agent crashed.
function asksApproval(task, step) {
  return task.steps[0].action === "openai-agents run" && step.action.startsWith("approve ");
}

// A LangGraph node stopped at interrupt(): its step is PENDING with the values it
// asked a person about, and the thread waits for the answer (Command(resume=...)).
function renderInterrupt(task) {
  const asking = task && task.status === "AWAITING_DECISION"
    ? task.steps.find((s) => s.status === "PENDING" && s.output && Array.isArray(s.output.interrupt))
    : null;
  $("interrupt").hidden = !asking;
  if (!asking) return;
  $("interrupt").dataset.step = asking.index;
  $("interrupt-question").textContent = `Step ${asking.index} "${asking.action}" asks:`;
  // The question as text: a value's "question" (or "message", "prompt"), else its JSON.
  $("interrupt-value").textContent = asking.output.interrupt.map(asked).join("\n");
  drawChoices(asking.output.interrupt);
  const answered = "answer" in asking.output;
  $("interrupt-form").hidden = answered;
  $("interrupt-answered").hidden = !answered;
  if (answered) {
    $("interrupt-answered").textContent = `Answered ${json(asking.output.answer)}: ` +
      "the graph goes on once its process reads the answer.";
  }
}

// The answers an interrupt offers (a value's "choices", strings or JSON), each a
// button that sends it as the answer at once, with the reason typed if any: the
// graph decides what an answer means, so the page offers only what the graph itself
// offers; the answer box stays for any other.
function drawChoices(values) {
  const offered = values.flatMap((v) => (v && Array.isArray(v.choices) ? v.choices : []));
  const box = $("interrupt-choices");
  box.hidden = offered.length === 0;
  const key = JSON.stringify(offered);
  if (box.dataset.choices === key) return;
  box.dataset.choices = key;
  box.replaceChildren(...offered.map((choice) => {
    const text = typeof choice === "string" ? choice : JSON.stringify(choice);
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = text;
    button.dataset.testid = "interrupt-choice";
    button.addEventListener("click", () => sendAnswer(choice));
    return button;
  }));
}

function asked(value) {
  if (typeof value === "string") return value;
  const text = value && ["question", "message", "prompt"].map((k) => value[k]).find((v) => typeof v === "string");
  return text ?? JSON.stringify(value, null, 2);
}

// The answer typed in, as the graph gets it: JSON when it parses, else the text.
function answerInterrupt(event) {
  event.preventDefault();
  const text = $("interrupt-answer").value.trim();
  if (!text) return;
  let value = text;
  try { value = JSON.parse(text); } catch { /* the text itself */ }
  sendAnswer(value);
}

// An answer (typed, or a choice clicked, sent as the graph offered it), with the
// reason typed if any.
async function sendAnswer(value) {
  const task = current && current.task;
  const step = task ? Number($("interrupt").dataset.step) : null;
  if (step === null) return;
  const input = { taskId: task.id, stepIndex: step, expectedVersion: task.version, value };
  const why = $("interrupt-why").value.trim();
  if (why) input.note = why;
  $("interrupt-result").textContent = "…";
  // One answer at a time: a second click while the first is on its way would be
  // refused (the version moved) and say so over the first's outcome.
  const buttons = [...$("interrupt-choices").children, $("interrupt-send")];
  buttons.forEach((button) => { button.disabled = true; });
  try {
    const result = (await graphql("pageAnswer", { input })).answerInterrupt;
    $("interrupt-result").textContent = result.__typename === "Task" ? "" : result.message;
    if (result.__typename === "Task") {
      $("interrupt-answer").value = "";
      $("interrupt-why").value = "";
      chosen(task.id);
    }
  } catch (error) {
    $("interrupt-result").textContent = error.message;
  } finally {
    buttons.forEach((button) => { button.disabled = false; });
  }
}

// Each step as a bar on one time axis (from the first start to now, or to the last
// end): its run time, and apart from it the time a person took to decide.
function renderSteps(task, now, live) {
  const times = task.steps.flatMap((s) => [ms(s.startedAt), ms(s.completedAt)]).filter((t) => t !== null);
  const from = times.length ? Math.min(...times) : now;
  const to = live && !FINAL.has(task.status) ? now : Math.max(from + 1000, ...times);
  const span = Math.max(to - from, 1000);
  $("axis-from").textContent = times.length ? clock(from) : "";
  $("axis-to").textContent = times.length ? (to === now ? "now" : clock(to)) : "";
  const place = (a, b) => `left:${(100 * (a - from)) / span}%;width:${Math.max(0.6, (100 * (b - a)) / span)}%`;
  $("steps").replaceChildren(...task.steps.map((step) => {
    const timing = stepTiming(step, now, live);
    const bars = [];
    if (timing.start !== null) {
      bars.push(el("span", { class: "bar s-" + step.status, style: place(timing.start, timing.runEnd) }));
      if (timing.waitEnd !== null) {
        bars.push(el("span", { class: "bar waiting", style: place(timing.runEnd, timing.waitEnd) }));
      }
    }
    const detail = step.error ?? json(step.output);
    return el("li", { "data-testid": "step-" + step.index, "data-status": step.status, class: "step" },
      el("div", { class: "step-head" },
        el("span", { class: "index" }, step.index),
        el("span", { class: "action" }, step.action),
        step.idempotent || asksApproval(task, step) ? null
          : el("span", { class: "unsafe", title: "needs a person's decision after a crash" }, "not safe to repeat"),
        el("span", { class: "badge s-" + step.status }, words(step.status))),
      el("div", { class: "track" }, bars),
      el("div", { class: "step-foot" },
        el("span", { class: "time", "data-testid": "time-" + step.index }, timing.text),
        step.attempts > 1 ? el("span", {}, `${step.attempts} attempts`) : null,
        step.spend && anySpent(step.spend) ? el("span", { class: "spent", "data-testid": "spend-" + step.index },
          spentText(step.spend) + (step.models && step.models.length ? " · " + step.models.join(", ") : "")) : null,
        ...reported(step),
        detail ? el("code", { class: step.error ? "out err" : "out", "data-testid": "output-" + step.index }, detail) : null));
  }));
}

/** The fields a step reports beyond those drawn (STEP_DRAWN), as "name: value". */
function reported(step) {
  return Object.keys(step).filter((name) => !STEP_DRAWN.has(name) && step[name] != null).map((name) =>
    el("span", { class: "reported", "data-testid": `${name}-${step.index}` },
      `${name.replace(/[A-Z]/g, (c) => " " + c.toLowerCase())}: ${json(step[name])}`));
}

/** What a PENDING step waits for: a LangGraph node stopped at interrupt() for a
 * person's answer (or, answered, for its graph to read it), else to run (again). */
function pendingText(step) {
  if (step.output && Array.isArray(step.output.interrupt)) {
    return "answer" in step.output ? "answered: waiting for the graph to go on" : "waiting for your answer";
  }
  return step.attempts ? "waiting to run again" : "not started";
}

function stepTiming(step, now, live) {
  const start = ms(step.startedAt);
  const end = ms(step.completedAt);
  const doubt = live ? current.doubts[step.index] : null;
  const none = { start: null, runEnd: null, waitEnd: null };
  if (step.status === "PENDING") return { ...none, text: pendingText(step) };
  if (start === null) return { ...none, text: end ? `done at ${clock(step.completedAt)}` : "" };
  if (doubt && ms(doubt.since) >= start) {
    const asked = ms(doubt.since);
    const answered = doubt.decided ? ms(doubt.decided) : now;
    const wait = doubt.decided ? `decided after ${seconds(answered - asked)}` : `waiting for you for ${seconds(answered - asked)}`;
    // A crash: the step was running from its start until its agent let the task go
    // or its lease lapsed (when this page saw it), else until its agent was last
    // heard of at the latest; not until the worker that took over found it in doubt.
    if (!doubt.holder) return { start, runEnd: asked, waitEnd: answered, text: `ran ${seconds(asked - start)} · ${wait}` };
    const began = `started ${clock(step.startedAt)}`;
    if (doubt.own) { // its agent put it in doubt and let the task go: no crash
      const released = doubt.released ? ` · ${doubt.holder} released its lease at ${clock(doubt.released)}` : "";
      return { start, runEnd: asked, waitEnd: answered, text: `${began}${released} · ${wait}` };
    }
    if (doubt.letGo) { // its agent stopped and let the task go: no lease lapsed
      const letGo = ms(doubt.letGo);
      return { start, runEnd: letGo, waitEnd: answered,
        text: `${began}, then ${doubt.holder} let the task go at ${clock(doubt.letGo)} · ${wait}` };
    }
    if (doubt.lapsed) {
      const lapsedAt = ms(doubt.lapsed);
      return { start, runEnd: lapsedAt, waitEnd: answered,
        text: `${began} · ${doubt.holder}'s lease lapsed at ${clock(lapsedAt)} · ${wait}` };
    }
    const heard = ms(doubt.heard) > start ? ` · last heard of at ${clock(doubt.heard)}` : "";
    const taken = doubt.takenOver ? ` · its lease lapsed before ${clock(doubt.takenOver)}` : "";
    return { start, runEnd: ms(doubt.heard) ?? start, waitEnd: answered,
      text: `${began}, then ${doubt.holder} stopped${heard}${taken} · ${wait}` };
  }
  if (step.status === "RUNNING") {
    return live ? { start, runEnd: now, waitEnd: null, text: `running for ${seconds(now - start)}` }
      : { start, runEnd: start, waitEnd: null, text: `running since ${clock(step.startedAt)}` };
  }
  if (step.status === "IN_DOUBT") return { start, runEnd: start, waitEnd: null, text: `started ${clock(step.startedAt)}` };
  if (end !== null && end === start) return { start, runEnd: end, waitEnd: null, text: `recorded at ${clock(step.completedAt)} (checkpoint)` };
  if (end !== null) return { start, runEnd: end, waitEnd: null, text: seconds(end - start) };
  return { start, runEnd: start, waitEnd: null, text: "" };
}

function renderTools(task, now, live) {
  $("no-tools").hidden = task.toolStates.length > 0;
  $("tools").replaceChildren(...task.toolStates.map((tool) => {
    const until = ms(tool.rateLimitResetAt);
    const limited = until !== null && (!live || until > now);
    return el("li", { class: "tool", "data-testid": "tool-" + tool.toolName, "data-status": tool.status },
      el("div", { class: "tool-head" },
        el("span", { class: "name" }, tool.toolName),
        el("span", { class: "badge s-" + (limited && live ? "LIMITED" : tool.status) },
          limited && live ? "rate-limited" : words(tool.status))),
      limited ? el("p", { class: "limit", "data-testid": "limit-" + tool.toolName }, live
        ? `rate-limited: may be called again in ${seconds(until - now)} (at ${clock(tool.rateLimitResetAt)})`
        : `rate-limited until ${clock(tool.rateLimitResetAt)}`) : null,
      el("p", { class: "quiet" }, `${tool.retryCount} of ${tool.maxRetries} retries used`),
      tool.lastError ? el("p", { class: "out err" }, "last error: " + tool.lastError) : null,
      tool.lastResult !== null && tool.lastResult !== undefined ? el("code", { class: "out" }, json(tool.lastResult)) : null);
  }));
}

// ------------------------------------------------------------- history

function renderScrubber() {
  const latest = current.task ? current.task.eventSeq : 1;
  const scrub = $("scrub");
  scrub.max = Math.max(latest, 1);
  const past = current.past;
  const seq = past ? past.asked : latest;
  if (scrubTo === null) scrub.value = seq;
  const entry = current.entries.find((e) => e.seq === seq);
  let said = entry ? ` · ${clock(entry.at)} · ${entry.text}` : "";
  if (current.holes.has(seq)) {
    said = ` · ${missingText(seq)}` + (past ? `: shown as it stood after event ${past.seq}` : "");
  }
  $("scrub-label").textContent = `event ${seq} of ${latest}${said}` + (past ? "" : " (live)");
}

function onScrub() {
  clearTimeout(scrubTimer);
  const seq = Number($("scrub").value);
  scrubTo = seq;
  scrubTimer = setTimeout(() => showPast(seq), 120);
}

async function showPast(seq) {
  const watching = current;
  if (!watching || !watching.task) return;
  if (seq >= watching.task.eventSeq) { scrubTo = null; backToLive(); return; }
  try {
    const past = await pastAt(watching, seq);
    if (watching !== current || scrubTo !== seq) return; // moved on since
    scrubTo = null;
    watching.past = past;
    const entry = watching.entries.find((e) => e.seq === past.seq);
    $("past-seq").textContent = past.seq;
    $("past-at").textContent = entry ? clock(entry.at) : `of ${watching.task.eventSeq}`;
    $("fork-result").textContent = "";
    $("fork-budget").textContent = forkKeeps(past.task);
    $("past").hidden = false;
    render();
  } catch (error) {
    scrubTo = null;
    $("scrub-label").textContent = "could not read the past: " + error.message;
  }
}

// The task as it stood after event `seq`: { seq, asked, task }. At a seq missing from
// the log (known, or found when taskAt fails there), the task after the nearest
// event before it that the log holds: `seq` is the event shown, `asked` the one
// the slider is at, and the page says both.
async function pastAt(watching, asked) {
  for (let seq = asked; seq >= 1; seq--) {
    if (watching.holes.has(seq)) continue;
    try {
      return { seq, asked, task: await taskAt(watching.id, seq) };
    } catch (error) {
      if (error instanceof Refused || !(await missingFromLog(watching, seq).catch(() => false))) throw error;
      watching.holes.add(seq);
    }
  }
  throw new Error(`no event up to ${asked} is in this task's log`);
}

async function taskAt(id, seq) {
  const data = await graphql("pageTaskAt", { id, seq });
  if (data.taskAt.__typename !== "Task") throw new Error(data.taskAt.message);
  return data.taskAt;
}

// Whether the log lacks event `seq`: the first event it holds after seq - 1 is a
// later one, or there is none though the task's eventSeq passed seq.
async function missingFromLog(watching, seq) {
  const data = await graphql("pageLog", { id: watching.id, after: seq - 1, first: 1 });
  const next = data.task.events[0];
  return next ? next.seq > seq : seq <= watching.task.eventSeq;
}

function backToLive() {
  if (!current) return;
  current.past = null;
  $("past").hidden = true;
  render();
}

// What a fork from the past shown keeps of spend and budget (services: fork_task).
function forkKeeps(task) {
  return task.budget ? `A fork starts with nothing spent, under the ${limits(task.budget)} budget this task had then.`
    : "A fork starts with nothing spent and, as this task had then, no budget.";
}

async function fork() {
  const watching = current;
  if (!watching || !watching.past) return;
  $("fork-result").textContent = "…";
  try {
    const data = await graphql("pageFork", { input: { taskId: watching.id, atSeq: watching.past.seq } });
    const result = data.forkTask;
    if (result.__typename !== "Task") { $("fork-result").textContent = result.message; return; }
    location.hash = "#task=" + encodeURIComponent(result.id); // route() opens it
    loadTasks();
  } catch (error) {
    $("fork-result").textContent = error.message;
  }
}

// ------------------------------------------------------------- decisions

async function decide(decision) {
  const task = current && current.task;
  const inDoubt = task && task.steps.find((s) => s.status === "IN_DOUBT");
  if (!inDoubt) return;
  const input = { taskId: task.id, stepIndex: inDoubt.index, expectedVersion: task.version, decision };
  const why = $("decision-why").value.trim();
  if (why) input.note = why;
  if (decision === "COMPLETE") {
    const text = $("complete-output").value.trim();
    if (text) {
      try { input.output = JSON.parse(text); } catch { input.output = text; }
    }
  }
  $("decision-result").textContent = "…";
  try {
    const data = await graphql("pageDecide", { input });
    const result = data.decideStep;
    $("decision-result").textContent = result.__typename === "Task" ? "" : result.message;
    if (result.__typename === "Task") {
      $("complete-output").value = "";
      $("decision-why").value = "";
      chosen(task.id);
    }
  } catch (error) {
    $("decision-result").textContent = error.message;
  }
}

// ------------------------------------------------------------- the clock

// Countdowns and running times move every second. Renewals write no event, so the
// lease of an active task is read every LEASE_CHECK_MS, and on every tick while it
// is due: renewed since the last read, or lapsed; the answer says which at once.
function tick() {
  if (current && current.task) {
    render();
    markNeeds();
    const now = Date.now();
    const asking = due(current.task, now) || now - lastLeaseCheck >= LEASE_CHECK_MS;
    if (!FINAL.has(current.task.status) && asking) {
      lastLeaseCheck = now;
      checkLease(current);
    }
  }
}

// Renewals write no event. Once the page knows a lease's ttl (from its LOCK_ACQUIRED
// event), it reads the lease again just after the holder's next renewal is due (a
// third of the ttl after the last, as the SDK renews), so the countdown follows the
// renewals and does not run down while the agent is healthy; the reads every
// LEASE_CHECK_MS remain for leases of unknown ttl.
function nextLeaseRead(watching) {
  clearTimeout(watching.leaseTimer);
  const task = watching.task;
  const lock = task && task.lock;
  const ttl = lock ? watching.ttls[lock.holderId] : null;
  if (!ttl || FINAL.has(task.status) || lapsed(task, Date.now())) return;
  const renewed = ms(lock.expiresAt) - ttl;
  const wait = Math.max(renewed + ttl / 3 + RENEWAL_SLACK_MS - Date.now(), RENEWAL_SLACK_MS);
  watching.leaseTimer = setTimeout(() => {
    if (watching !== current) return;
    lastLeaseCheck = Date.now();
    checkLease(watching);
  }, wait);
}

async function checkLease(watching) {
  try {
    const data = await graphql("pageLease", { id: watching.id });
    if (watching !== current || !data.task || data.task.stalled === undefined) return;
    // The server shows no lock once it lapsed; the page keeps the lapsed one, to
    // say whose it was (and to tell the next holder's takeover).
    const lock = data.task.lock ?? (data.task.stalled ? watching.task.lock : null);
    const before = watching.task.lock;
    const now = Date.now();
    noteLease(watching, data.task.lock, now, true);
    if (data.task.lock && before && before.holderId === data.task.lock.holderId &&
        before.expiresAt !== data.task.lock.expiresAt) {
      // Renewed since the last read: its ttl is at least what is left of it now.
      watching.ttls[data.task.lock.holderId] = ms(data.task.lock.expiresAt) - now;
    }
    const wasDue = due(watching.task, now);
    watching.task = { ...watching.task, lock, stalled: data.task.stalled };
    nextLeaseRead(watching);
    if (wasDue) { render(); markNeeds(); } // a due lease is settled now, not at the next tick
  } catch (error) {
    if (!(error instanceof Refused)) console.warn("lease:", error.message);
  }
}

// ------------------------------------------------------------- the session's ledger

// The session open on the page (followed with #session=, else the shown task's):
// its ledger followed live over a socket of its own (sessionSubmissions: a SNAPSHOT
// of the unfinished inputs, then each one admitted or changed), the finished ones
// read once (pageEntries), and its schedules, read again after each fire.
let ledger = null; // { session, entries (by seq), schedules, socket, retry, live, known }
const ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone; // the viewer's
const POLICIES = { REJECT: "reject", ENQUEUE: "queue", INTERRUPT: "interrupt", ROLLBACK: "roll back" };
const ENTRIES_READ = 100; // pageEntries reads the ledger's first 100
// The forms under a task, folded away while its session has no inputs and no
// schedules: a person who only has to decide sees the task alone.
const FOLDS = ["send-fold", "schedules-fold"];

function openSession() {
  if (followedSession !== null) return followedSession;
  if (current && current.task) return current.task.sessionId;
  return null;
}

// The task of the followed session's ACTIVE input, once its ledger is read.
function turn() {
  if (!ledger || ledger.session !== followedSession) return null;
  const active = [...ledger.entries.values()].find((e) => e.status === "ACTIVE" && e.taskId);
  return active ? { id: active.taskId } : null;
}

// Follows the open session's ledger, once it is known and unless it already does; a
// page between two tasks keeps the ledger it shows.
function watchLedger() {
  const session = openSession();
  if (!token || session === null || (ledger && ledger.session === session)) return;
  closeLedger();
  ledger = { session, entries: new Map(), schedules: null, socket: null, retry: 500, live: false, known: false,
    unfolded: new Set() };
  for (const id of ["submit-result", "cancel-result", "schedule-result"]) $(id).textContent = "";
  for (const id of FOLDS) $(id).open = false;
  $("schedule-zone").value = ZONE;
  $("ledger").hidden = false;
  connectLedger(ledger);
  renderLedger();
}

// Opens a folded part of the ledger once the session has what it is about (inputs,
// schedules), once per session: a person who folds it again keeps it folded.
function unfold(id) {
  if (ledger.unfolded.has(id)) return;
  ledger.unfolded.add(id);
  $(id).open = true;
}

function closeLedger() {
  if (!ledger) return;
  const old = ledger;
  ledger = null;
  if (old.socket) old.socket.close();
  $("ledger").hidden = true;
}

function connectLedger(watching) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(`${scheme}//${location.host}/graphql`, "graphql-transport-ws");
  watching.socket = ws;
  ws.onopen = () => ws.send(JSON.stringify({
    type: "connection_init", payload: { authorization: "Bearer " + token } }));
  ws.onmessage = async (message) => {
    const msg = JSON.parse(message.data);
    if (msg.type === "connection_ack") {
      watching.retry = 500;
      const query = (await DOCUMENTS).pageLedger.body;
      ws.send(JSON.stringify({ id: "1", type: "subscribe",
        payload: { query, variables: { sessionId: watching.session } } }));
    } else if (msg.type === "next") {
      if (msg.payload.errors) ledgerSays(watching, "error", msg.payload.errors[0].message);
      else onLedger(watching, msg.payload.data.sessionSubmissions);
    } else if (msg.type === "ping") {
      ws.send(JSON.stringify({ type: "pong" }));
    } else if (msg.type === "error") {
      ledgerSays(watching, "error", msg.payload[0].message);
    } else if (msg.type === "complete" && watching.live) {
      ledgerSays(watching, "ended", "the session was deleted");
    }
  };
  ws.onclose = (event) => {
    if (watching !== ledger || watching.socket !== ws) return;
    watching.socket = null;
    if (event.code === 4403) { signOut("This page's token was refused. Sign in again."); return; }
    // Whatever changed meanwhile comes with the next SNAPSHOT and read.
    ledgerSays(watching, "reconnecting", event.code === 4029 ? "too many open pages; trying again…" : "reconnecting…");
    setTimeout(() => { if (watching === ledger) connectLedger(watching); }, watching.retry);
    watching.retry = Math.min(watching.retry * 2, 5000);
  };
}

// The ledger's state: live, reconnecting, ended, or an error. Once live or refused
// it is known: the page may pick the session's task (follow).
function ledgerSays(watching, state, text) {
  if (watching !== ledger) return;
  watching.live = state === "live";
  watching.known = watching.known || state !== "reconnecting";
  $("ledger-state").dataset.state = state;
  $("ledger-state").textContent = text;
}

function onLedger(watching, event) {
  if (watching !== ledger) return;
  for (const submission of event.submissions) keep(watching, submission, true);
  if (event.kind === "SNAPSHOT") {
    ledgerSays(watching, "live", "live");
    readEntries(watching);
    readSchedules(watching);
  } else if (event.submissions.some((s) => s.scheduleId)) {
    readSchedules(watching); // a fire: its schedule's next time moved on
  }
  renderLedger();
  follow(); // the next input's turn may have come
}

// A submission as the page holds it: the stream's (`fresh`) replaces what is held
// unless it is older; a read's replaces only what is older (a read answered after
// an event may predate it). Its task's goal stays once the task is removed.
function keep(watching, submission, fresh) {
  const held = watching.entries.get(submission.seq);
  if (held) {
    const [was, now] = [ms(held.updatedAt), ms(submission.updatedAt)];
    if (fresh ? now < was : now <= was) return;
  }
  const goal = submission.task ? submission.task.goal : held ? held.goal : null;
  watching.entries.set(submission.seq, { ...submission, goal });
}

async function readEntries(watching) {
  try {
    const session = (await graphql("pageEntries", { id: watching.session })).session;
    if (watching !== ledger) return;
    if (session.__typename !== "AgentSession") { ledgerSays(watching, "error", session.message); return; }
    for (const submission of session.submissions) keep(watching, submission, false);
    renderLedger();
  } catch (error) {
    if (!(error instanceof Refused)) console.warn("ledger:", error.message);
  }
}

function renderLedger() {
  if (!ledger) return;
  $("ledger-session").textContent = ledger.session;
  const entries = [...ledger.entries.values()].sort((a, b) => a.seq - b.seq);
  $("no-entries").hidden = entries.length > 0 || !ledger.live;
  if (entries.length > 0) unfold("send-fold");
  const items = [];
  let last = 0;
  for (const entry of entries) {
    if (entry.seq > last + 1) {
      const range = entry.seq === last + 2 ? `#${last + 1}` : `#${last + 1} to #${entry.seq - 1}`;
      items.push(el("li", { class: "entry-gap quiet" },
        `${range}: finished, not shown (the page reads the first ${ENTRIES_READ} of a ledger)`));
    }
    items.push(entryItem(entry));
    last = entry.seq;
  }
  $("entries").replaceChildren(...items);
}

// "#2 Book a trip · by ana · 10:41:05 · if busy: queue · {"traveller": "Ana"}", its status,
// why it ended as it did, and a link to its task while there is one (a ROLLBACK, a
// cancel remove it; a SKIPPED fire has none).
function entryItem(entry) {
  const schedule = (ledger.schedules ?? []).find((s) => s.id === entry.scheduleId);
  const goal = entry.goal ?? schedule?.goal ??
    (entry.taskId ? "its task" : entry.status === "SKIPPED" ? "a fire that did not run" : "its task was removed");
  const task = entry.taskId
    ? el("a", { href: "#task=" + encodeURIComponent(entry.taskId), class: "goal",
      "data-testid": "entry-task-" + entry.seq }, goal)
    : el("span", { class: "goal" }, goal);
  const why = reason(entry);
  return el("li", { class: current && current.id === entry.taskId ? "entry current" : "entry",
    "data-testid": "entry-" + entry.seq, "data-status": entry.status },
  el("div", { class: "entry-head" },
    el("span", { class: "index" }, "#" + entry.seq),
    task,
    el("span", { class: "badge s-" + entry.status, "data-testid": "entry-status-" + entry.seq },
      words(entry.status))),
  el("div", { class: "entry-foot" },
    el("span", { "data-testid": "entry-actor-" + entry.seq }, "by " + submitter(entry)),
    entry.scheduledFor ? null : el("span", {}, clock(entry.createdAt)), // a fire's says when
    el("span", { "data-testid": "entry-policy-" + entry.seq }, "if busy: " + POLICIES[entry.policy]),
    entry.input === null || entry.input === undefined ? null : el("code", { class: "out" }, json(entry.input)),
    entry.status === "QUEUED" ? el("button", { type: "button", class: "cancel", "data-id": entry.id,
      "data-testid": "cancel-" + entry.seq }, "Cancel") : null),
  why ? el("p", { class: "reason", "data-testid": "reason-" + entry.seq }, why) : null);
}

// Who sent it: a person, or a schedule (named by its cron expression, and the time
// it fired for).
function submitter(entry) {
  if (!entry.scheduleId) return entry.actor ?? "someone";
  const schedule = (ledger.schedules ?? []).find((s) => s.id === entry.scheduleId);
  const named = schedule ? `schedule "${schedule.cron}"` : "a schedule";
  return entry.scheduledFor ? `${named}, for ${clock(entry.scheduledFor)}` : named;
}

// Why an entry stands as it does, in words: asked to stop by a later one, stopped
// by it, cancelled or skipped (the server's reason).
function reason(entry) {
  const by = entry.displacedBy ? [...ledger.entries.values()].find((e) => e.id === entry.displacedBy) : null;
  const whom = by ? `#${by.seq} (${by.goal ?? "an input"}, by ${submitter(by)})` : null;
  if (entry.status === "ACTIVE" && entry.displacedBy) {
    return `Asked to stop by ${whom ?? "a later input"}: its task ends at its next step, what it did kept.`;
  }
  if (entry.status === "INTERRUPTED" && whom) return `Interrupted by ${whom}: what its task did is kept.`;
  if (entry.status === "ROLLED_BACK" && whom) {
    return `Rolled back by ${whom}: its task was removed; what it spent stays counted.`;
  }
  return entry.reason;
}

async function cancelEntry(button) {
  const watching = ledger;
  $("cancel-result").textContent = "…";
  try {
    const result = (await graphql("pageCancel", { input: { id: button.dataset.id } })).cancelSubmission;
    if (watching !== ledger) return;
    // The entry itself turns CANCELLED when the ledger's change comes.
    $("cancel-result").className = result.__typename === "Submission" ? "" : "refused";
    $("cancel-result").textContent = result.__typename === "Submission" ? "" : "Not cancelled: " + result.message;
  } catch (error) {
    $("cancel-result").textContent = error.message;
  }
}

// A plan from a field of one action a line.
function planOf(text) {
  return text.split("\n").map((line) => line.trim()).filter(Boolean).map((action) => ({ action }));
}

// A person's input, under the policy chosen; the answer in words (a refusal says
// what was refused and what to do). The entry itself comes with the ledger's change.
async function submitInput(event) {
  event.preventDefault();
  const watching = ledger;
  if (!watching) return;
  const input = { sessionId: watching.session, goal: $("submit-goal").value.trim(),
    steps: planOf($("submit-steps").value),
    policy: document.querySelector("input[name=policy]:checked").value };
  const text = $("submit-input").value.trim();
  if (text) {
    try { input.input = JSON.parse(text); } catch { input.input = text; }
  }
  $("submit-result").textContent = "…";
  try {
    const result = (await graphql("pageSubmit", { input })).submitInput;
    if (watching !== ledger) return;
    $("submit-result").className = result.__typename === "Submission" ? "" : "refused";
    $("submit-result").textContent = submitted(result, input.policy);
    if (result.__typename === "Submission") {
      for (const id of ["submit-goal", "submit-steps", "submit-input"]) $(id).value = "";
    }
  } catch (error) {
    $("submit-result").textContent = error.message;
  }
}

function submitted(result, policy) {
  if (result.__typename === "Submission") {
    if (result.status === "ACTIVE") return `Sent as #${result.seq}: it runs now.`;
    if (policy === "ENQUEUE") return `Sent as #${result.seq}: queued, it runs once the inputs before it have finished.`;
    return `Sent as #${result.seq}: the running input is asked to stop; #${result.seq} runs next.`;
  }
  if (result.__typename === "SessionBusy") {
    return `Not sent: the session is busy with #${result.active.seq}, and nothing was written. ` +
      "Choose Queue to run it after, or Interrupt to stop the running one.";
  }
  return "Not sent: " + result.message; // an InvalidInput's names its field first
}

// ------------------------------------------------------------- schedules

async function readSchedules(watching) {
  try {
    const session = (await graphql("pageSchedules", { id: watching.session })).session;
    if (watching !== ledger || session.__typename !== "AgentSession") return;
    watching.schedules = session.schedules;
    renderSchedules();
    renderLedger(); // fires name their schedule
  } catch (error) {
    if (!(error instanceof Refused)) console.warn("schedules:", error.message);
  }
}

// A time in the viewer's own zone ("Sat 4 Jan, 23:00"), seconds shown when it has
// them; its UTC time ("2026-01-04 14:00:00 UTC") for a tooltip.
function local(iso) {
  const at = new Date(iso);
  const options = { weekday: "short", day: "numeric", month: "short", hour: "2-digit", minute: "2-digit",
    hourCycle: "h23" };
  if (at.getUTCSeconds()) options.second = "2-digit";
  return new Intl.DateTimeFormat(undefined, options).format(at);
}

const utc = (iso) => new Date(iso).toISOString().slice(0, 19).replace("T", " ") + " UTC";

function when(iso, testId) {
  return el("time", { datetime: iso, title: utc(iso), "data-testid": testId }, local(iso));
}

function renderSchedules() {
  const schedules = ledger.schedules ?? [];
  $("no-schedules").hidden = ledger.schedules === null || schedules.length > 0;
  if (schedules.length > 0) unfold("schedules-fold");
  $("schedules").replaceChildren(...schedules.map((s) => el("li", { class: "schedule",
    "data-testid": "schedule-" + s.id, "data-enabled": String(s.enabled), "data-version": s.version },
  el("div", { class: "schedule-head" },
    el("code", { class: "cron" }, s.cron),
    el("span", { class: "quiet" }, "in " + s.timezone),
    el("span", { class: "badge s-" + (s.enabled ? "ACTIVE" : "PAUSED"), "data-testid": "schedule-state-" + s.id },
      s.enabled ? "on" : "paused")),
  el("p", {}, s.goal, el("span", { class: "quiet" },
    ` · if busy: ${POLICIES[s.policy]} · missed times ${s.misfire === "SKIP" ? "not made up" : "made up once"}`)),
  el("p", { "data-testid": "schedule-next-" + s.id }, s.enabled && s.nextFireAt
    ? ["Next: ", when(s.nextFireAt, "schedule-at-" + s.id), ` (your time, ${ZONE})`]
    : s.enabled ? "It fires no more." : "Paused: it sends nothing until resumed."),
  s.lastFireAt ? el("p", { class: "quiet" }, "Last fired ", when(s.lastFireAt, null)) : null,
  el("div", { class: "choices" },
    el("button", { type: "button", "data-id": s.id, "data-act": s.enabled ? "pause" : "resume",
      "data-testid": (s.enabled ? "pause-" : "resume-") + s.id }, s.enabled ? "Pause" : "Resume"),
    el("button", { type: "button", "data-id": s.id, "data-act": "delete", "data-testid": "delete-" + s.id },
      "Delete")))));
}

// Pause, resume (at the version the page read: one changed since is refused and
// read again) or delete.
async function changeSchedule(button) {
  const watching = ledger;
  const schedule = (watching.schedules ?? []).find((s) => s.id === button.dataset.id);
  if (!schedule) return;
  $("schedule-result").textContent = "…";
  try {
    let result;
    if (button.dataset.act === "delete") {
      result = (await graphql("pageDeleteSchedule", { input: { id: schedule.id } })).deleteSchedule;
    } else {
      const input = { id: schedule.id, expectedVersion: schedule.version, enabled: button.dataset.act === "resume" };
      result = (await graphql("pagePauseSchedule", { input })).updateSchedule;
    }
    if (watching !== ledger) return;
    $("schedule-result").textContent = result.message === undefined ? ""
      : result.__typename === "VersionConflict" ? "It was changed elsewhere meanwhile: shown again as it is now."
        : result.message;
    readSchedules(watching);
  } catch (error) {
    $("schedule-result").textContent = error.message;
  }
}

async function addSchedule(event) {
  event.preventDefault();
  const watching = ledger;
  if (!watching) return;
  const input = { sessionId: watching.session, cron: $("schedule-cron").value.trim(),
    timezone: $("schedule-zone").value.trim(), goal: $("schedule-goal").value.trim(),
    steps: planOf($("schedule-steps").value), policy: $("schedule-policy").value,
    misfire: $("schedule-misfire").value };
  $("schedule-result").textContent = "…";
  try {
    const result = (await graphql("pageAddSchedule", { input })).createSchedule;
    if (watching !== ledger) return;
    $("schedule-result").className = result.__typename === "Schedule" ? "" : "refused";
    if (result.__typename === "Schedule") {
      $("schedule-result").textContent = "";
      for (const id of ["schedule-cron", "schedule-goal", "schedule-steps"]) $(id).value = "";
      readSchedules(watching);
    } else {
      $("schedule-result").textContent = "Not added: " + result.message;
    }
  } catch (error) {
    $("schedule-result").textContent = error.message;
  }
}

// ------------------------------------------------------------- start

$("signin-form").addEventListener("submit", (event) => {
  event.preventDefault();
  signIn($("token").value.trim());
});
$("signout").addEventListener("click", () => {
  localStorage.removeItem(TOKEN_KEY); // a new tab asks for a token again
  signOut("");
});
$("retry").addEventListener("click", () => decide("RETRY"));
$("skip").addEventListener("click", () => decide("SKIP"));
$("complete-form").addEventListener("submit", (event) => { event.preventDefault(); decide("COMPLETE"); });
$("scrub").addEventListener("input", onScrub);
$("live").addEventListener("click", backToLive);
$("fork").addEventListener("click", fork);
$("interrupt-form").addEventListener("submit", answerInterrupt);
$("raise-form").addEventListener("submit", raiseBudget);
$("submit-form").addEventListener("submit", submitInput);
$("schedule-form").addEventListener("submit", addSchedule);
$("entries").addEventListener("click", (event) => {
  const button = event.target.closest("button.cancel");
  if (button) cancelEntry(button);
});
$("schedules").addEventListener("click", (event) => {
  const button = event.target.closest("button[data-act]");
  if (button) changeSchedule(button);
});
$("zones").replaceChildren(...Intl.supportedValuesOf("timeZone").map((zone) => el("option", { value: zone })));
window.addEventListener("hashchange", onHashChange);
setInterval(tick, TICK_MS);

readToken();
if (token) start();
else signOut("");
