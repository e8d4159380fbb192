/**
 * How a page of `genpipe ui` follows its event stream, shared by the runs list (runs-page.ts), a
 * run's page (run-page.ts) and the fleet page (fleet-routes.ts). A stream the server refused (the
 * cap of event-stream.ts answers 503) ends for good, and an EventSource shows nothing of that: the
 * page would stay still, which looks like a quiet run. So the page says so in its `#live` line,
 * and says it is reconnecting while the browser tries again after a dropped connection.
 * EventSource gives no status code: an `error` with `readyState` CLOSED is a stream ended for
 * good (an answer that is not a stream: the 503, or a 404 from a server that no longer has the
 * run), one with CONNECTING is a retry. A ui that stopped is a retry: Chromium tries again until
 * it answers, so the page says it is reconnecting, not that its updates stopped.
 */

/** What a page says once its stream has ended for good; docs/guides/ui.md quotes it. */
export const LIVE_STOPPED =
  'Live updates stopped: genpipe ui refused them, most likely because too many pages follow live at once. Close another genpipe ui page and reload this one.';
export const LIVE_RECONNECTING = 'Reconnecting to genpipe ui…';

/** The line a page shows it in, near its top. */
export const LIVE_LINE = '<p id="live" class="error" role="status"></p>';

/** The browser function `followLive(url)`: opens the page's EventSource, keeps `#live` saying how it goes, and returns it. */
export const PAGE_LIVE = String.raw`
  // live:begin. The page's event stream, and its #live line (ui/page-live.ts).
  const followLive = (url) => {
    const events = new EventSource(url);
    const line = document.getElementById('live');
    const say = (state, text) => {
      line.dataset.live = state;
      line.textContent = text;
    };
    events.addEventListener('open', () => say('open', ''));
    events.addEventListener('error', () => {
      if (events.readyState === EventSource.CLOSED) say('stopped', ${JSON.stringify(LIVE_STOPPED)});
      else say('reconnecting', ${JSON.stringify(LIVE_RECONNECTING)});
    });
    return events;
  };
  // live:end
`;
