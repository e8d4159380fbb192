/**
 * `/_emulator/*`: inspection and control endpoints, loopback only, never under the spec's paths.
 * GET ledger, requests, stats, webhooks, presets; POST stats/reset, faults, catalog, presets/{id}.
 */
import * as z from 'zod';
import type { AgentService } from './agent.js';
import { FAULT_PROFILES, FaultFile, profileFromSpec, type FaultEngine } from './faults.js';
import { HttpError, json, parseJson, validate, type EmuResponse } from './http-util.js';
import type { Ledger } from './ledger.js';
import type { CatalogState } from './options-catalog.js';
import type { PresetCatalog } from './presets.js';
import type { RequestStore } from './request-store.js';
import type { Route, RouteInput } from './router.js';
import type { Stats } from './stats.js';
import type { WebhookDispatcher } from './webhooks.js';

export interface InspectionDeps {
  ledger: Ledger;
  requests: RequestStore;
  stats: Stats;
  faults: FaultEngine;
  webhooks: WebhookDispatcher;
  catalog: CatalogState;
  presets: PresetCatalog;
  agent: AgentService;
}

const FaultsBody = z.union([z.strictObject({ profile: z.enum(['none', 'flaky', 'hostile']) }), FaultFile]);
const CatalogBody = z.strictObject({ hidden: z.boolean().optional(), bump_revision: z.boolean().optional() });
const PresetBody = z.strictObject({ visible: z.boolean() });

export function inspectionRoutes(d: InspectionDeps): Route[] {
  const keyOf = (i: RouteInput): string | undefined => i.url.searchParams.get('key_id') ?? undefined;
  const get = (pattern: string, handler: (i: RouteInput) => EmuResponse): Route => ({ method: 'GET', pattern, cls: 'inspection', handler });
  const post = (pattern: string, handler: (i: RouteInput) => EmuResponse): Route => ({
    method: 'POST',
    pattern,
    cls: 'inspection',
    handler,
  });
  return [
    get('/_emulator/ledger', (i) => json(200, d.ledger.toJSON(keyOf(i)))),
    get('/_emulator/requests', (i) => json(200, { requests: d.requests.inspect({ keyId: keyOf(i) }) })),
    get('/_emulator/stats', () => json(200, statsDocument(d))),
    post('/_emulator/stats/reset', () => {
      d.stats.reset();
      d.requests.peakActive = d.requests.active;
      return json(200, statsDocument(d));
    }),
    get('/_emulator/webhooks', () => json(200, { pending: d.webhooks.pending, deliveries: d.webhooks.deliveries })),
    get('/_emulator/presets', () =>
      json(200, { presets: d.presets.presets.map((p) => ({ id: p.id, name: p.name, aspect_ratio: p.aspectRatio, visible: p.visible })) }),
    ),
    post('/_emulator/faults', (i) => {
      const body = validate(FaultsBody, parseJson(i.body));
      d.faults.set('profile' in body ? FAULT_PROFILES[body.profile] : profileFromSpec(body, 'runtime'));
      return json(200, { profile: d.faults.profile });
    }),
    post('/_emulator/catalog', (i) => {
      const body = validate(CatalogBody, parseJson(i.body));
      if (body.hidden !== undefined) d.catalog.hidden = body.hidden;
      if (body.bump_revision === true) d.catalog.bumpRevision();
      return json(200, { hidden: d.catalog.hidden, config_revision: d.catalog.catalog.config_revision });
    }),
    post('/_emulator/presets/:id', (i) => {
      const body = validate(PresetBody, parseJson(i.body));
      if (!d.presets.setVisible(i.params.id ?? '', body.visible)) throw new HttpError(404, 'preset not found');
      return json(200, { id: i.params.id, visible: body.visible });
    }),
  ];
}

export function statsDocument(d: Pick<InspectionDeps, 'stats' | 'requests' | 'faults' | 'agent'>): Record<string, unknown> {
  const s = d.stats;
  return {
    since: new Date(s.startedAt).toISOString(),
    in_flight: s.inFlight,
    peak_in_flight: s.peakInFlight,
    active_requests: d.requests.active,
    peak_active_requests: d.requests.peakActive,
    total: s.total,
    by_route: Object.fromEntries(s.byRoute),
    by_status: Object.fromEntries(s.byStatus),
    faults_injected: { ...d.faults.injected },
    fault_profile: d.faults.profile.name,
    requests: d.requests.byId.size,
    agent_sessions: d.agent.sessions.size,
  };
}
