// An internal extension written against the Lambda Extensions API reference, in the pattern AWS
// documents for work after the response: it registers during init, and on each INVOKE waits
// for the handler to finish, works for WORK_MS more (the caller already has its answer), and
// only then asks for its next event. Lambda keeps the environment thawed, and billing, until
// then. It also tries two registrations Lambda refuses: one for SHUTDOWN (at init), one after
// init (when the event says `register`). INIT_ERROR=1 makes it report an init error instead.
const api = `http://${process.env.AWS_LAMBDA_RUNTIME_API}/2020-01-01/extension`;
const WORK_MS = Number(process.env.WORK_MS ?? 300);

const register = (name, events) =>
  fetch(`${api}/register`, {
    method: 'POST',
    headers: { 'Lambda-Extension-Name': name },
    body: JSON.stringify({ events }),
  });

const refused = await register('wants-shutdown', ['INVOKE', 'SHUTDOWN']);
const shutdownRefusal = { status: refused.status, body: await refused.json() };
if (refused.ok) {
  // Were it accepted, it would be an extension like the other: it must ask for its events.
  const wrongId = refused.headers.get('lambda-extension-identifier');
  void (async () => {
    for (;;) {
      const next = await fetch(`${api}/event/next`, {
        headers: { 'Lambda-Extension-Identifier': wrongId },
      });
      await next.json();
    }
  })();
}
const registered = await register('work-after-response', ['INVOKE']);
const id = registered.headers.get('lambda-extension-identifier');
const registration = { status: registered.status, body: await registered.json() };

// The handler's end, per request ID: whichever of the handler and the extension sees an
// invocation first creates its entry.
const handlers = new Map();
const handlerOf = (requestId) => {
  let entry = handlers.get(requestId);
  if (!entry) {
    let resolve = () => undefined;
    const returned = new Promise((done) => {
      resolve = done;
    });
    entry = { returned, resolve };
    handlers.set(requestId, entry);
  }
  return entry;
};
const work = [];

const loop = async () => {
  for (;;) {
    const next = await fetch(`${api}/event/next`, {
      headers: { 'Lambda-Extension-Identifier': id },
    });
    const event = await next.json();
    if (event.eventType !== 'INVOKE') continue;
    await handlerOf(event.requestId).returned;
    handlers.delete(event.requestId);
    await new Promise((done) => setTimeout(done, WORK_MS));
    work.push({ requestId: event.requestId, deadlineMs: event.deadlineMs, endedAt: Date.now() });
  }
};
if (process.env.INIT_ERROR === '1') {
  // It fails to initialise after registering, and says so as the reference asks.
  await fetch(`${api}/init/error`, {
    method: 'POST',
    headers: {
      'Lambda-Extension-Identifier': id,
      'Lambda-Extension-Function-Error-Type': 'Extension.ConfigInvalid',
    },
    body: JSON.stringify({ errorType: 'Extension.ConfigInvalid', errorMessage: 'no endpoint' }),
  });
} else {
  void loop();
}

export const handler = async (event, context) => {
  try {
    if (event?.register) {
      const late = await register('too-late', ['INVOKE']);
      return { late: { status: late.status, body: await late.json() } };
    }
    return { requestId: context.awsRequestId, work, registration, shutdownRefusal };
  } finally {
    handlerOf(context.awsRequestId).resolve();
  }
};
