/**
 * genpipe's public library API. Anything not exported here is private.
 */
export { GenerationClient, type GenerationClientOptions } from './api/client.js';
export { resolveConfig, readConfigFile, type ClientConfig, type ConfigFlags, type ResolveConfigOptions } from './api/config.js';
export { Credentials, credentialsFromEnv, credentialsFromFile, parseCredentialPair } from './api/credentials.js';
export {
  GenpipeError,
  InvalidInputError,
  IndeterminateSubmissionError,
  FollowMismatchError,
  InternalAddressError,
  errorFromStatus,
  isGenpipeError,
  type ErrorCode,
  type InputIssue,
} from './api/errors.js';
export {
  backoffDelay,
  decideRetry,
  parseRetryAfter,
  type AttemptOutcome,
  type BackoffOptions,
  type CallSafety,
  type RetryDecision,
} from './api/retry.js';
export {
  Transport,
  createDefaultDispatcher,
  sha256Hex,
  type CallOptions,
  type CallResult,
  type ExchangeEvent,
  type TransportOptions,
} from './api/transport.js';
export { createGuardedAgent, guardedLookup, type GuardedAgentOptions, type Resolver } from './api/connect-guard.js';
export { buildCharacterSheetRequest, type CharacterSheetSubmitOptions } from './api/character-sheet.js';
export { buildMarketingImageRequest } from './api/marketing-image.js';
export { checkSelection, normalizeSelection, type SelectionCheck } from './api/selection.js';
export { CatalogCache } from './api/options-catalog.js';
export { AGENT_POLL, agentPollInterval, answerText, turnOutcome, type TurnOutcome, type TurnPollOptions } from './api/agent.js';
export { checkLocalImage, sniffImageKind, isAnimated, MAX_IMAGE_BYTES, type LocalImage } from './api/local-image.js';
export { sleep } from './api/sleep.js';
export * as wire from './api/wire.js';
export { redact, registerSecret } from './util/redact.js';
export { startEmulator, type Emulator, type EmulatorOptions, DEFAULT_KEY_ID, DEFAULT_SECRET, FAULT_PROFILES } from './emulator/index.js';
export {
  checkManifestFile,
  checkManifestText,
  loadManifestFile,
  loadManifestText,
  type LoadedManifest,
  type ManifestCheck,
} from './manifest/load.js';
export { ManifestError, type ManifestProblem } from './manifest/errors.js';
export { buildPlan, Plan, PlannedInstance, type PlanOptions, type StepPlan } from './plan/plan.js';
export { startRun, resumeRun, exitCodeOf, type RunResult, type SessionIO, type SessionOptions } from './session/run-session.js';
export { estimateRun, type RunEstimate } from './session/spend-guard.js';
export type { RunEvent, RunListener, RunSummary } from './run/events.js';
export { createMetrics, type Metrics, type MetricsOptions } from './metrics/metrics.js';
export type { RunObserver } from './run/observer.js';
