import { describe, expect, it } from 'vitest';
import type { Submission } from '../../src/models/adapter.js';
import { requestIdOf, sessionOf, submissionId, submissionIdColumn } from '../../src/models/submission.js';
import { MODEL_DEFINITIONS } from '../../src/models/registry.js';

const request: Submission = { kind: 'request', requestId: 'r-1' };
const jobSet: Submission = { kind: 'job_set', jobSetId: 'j-1' };
const turn: Submission = { kind: 'agent_turn', sessionId: 's-1', messageId: 'm-2', firstMessageId: 'm-1', repliesUsed: 1 };

describe('what code outside the models may ask of a submission', () => {
  it('names each kind by the id the service gave it, in the column outputs.csv keeps it in', () => {
    expect([request, jobSet, turn].map((s) => [submissionId(s), submissionIdColumn(s)])).toEqual([
      ['r-1', 'request_id'],
      ['j-1', 'job_set_id'],
      ['m-2', 'request_id'],
    ]);
  });

  it('has a request id (what a webhook names) only for a single request', () => {
    expect([request, jobSet, turn].map(requestIdOf)).toEqual(['r-1', undefined, undefined]);
  });

  it('has a session only for an agent turn', () => {
    expect([request, jobSet, turn].map(sessionOf)).toEqual([undefined, undefined, 's-1']);
  });
});

describe('model knowledge lives in the model definitions', () => {
  it('the agent is the one conversational model, and the character sheet the one that needs the catalog', () => {
    expect(MODEL_DEFINITIONS.filter((m) => m.conversation !== undefined).map((m) => [m.name, m.conversation])).toEqual([
      ['agent', { messageField: 'content' }],
    ]);
    expect(MODEL_DEFINITIONS.filter((m) => m.catalogField !== undefined).map((m) => [m.name, m.catalogField])).toEqual([
      ['character-sheet', 'selection'],
    ]);
  });
});
