/** The emulator: a faithful local Generation Service with a ledger and fault injection. */
export { startEmulator, type Emulator, type EmulatorOptions } from './start-emulator.js';
export {
  accountFromPair,
  accountsFromFile,
  DEFAULT_ACCOUNT,
  DEFAULT_CREDITS,
  DEFAULT_KEY_ID,
  DEFAULT_SECRET,
  type AccountSpec,
} from './accounts.js';
export {
  FAULT_PROFILES,
  loadFaultProfile,
  profileFromSpec,
  PROFILE_NAMES,
  ROUTE_CLASSES,
  type FaultProfile,
  type ForcedFault,
  type RouteClass,
  type RouteFaults,
} from './faults.js';
export type { LedgerEntry } from './ledger.js';
export { CLARIFYING_QUESTION } from './scripted-agent.js';
