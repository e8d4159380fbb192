/** An agent turn (§4.6): one message in a conversation's session, answered by polling. */
import { validateBody } from '../api/validate.js';
import { SendMessageRequest } from '../api/wire.js';
import { agentAdapter } from './agent-adapter.js';
import type { ModelDefinition } from './model.js';

export const agent: ModelDefinition<'agent'> = {
  name: 'agent',
  summary: "an agent turn: one message in a conversation's session, answered as text (and media it generates)",
  inputSchema: SendMessageRequest,
  build: (input) => validateBody(SendMessageRequest, input, 'agent message'),
  imageFields: [],
  placeholderOutputs: (id) => ({
    session_id: '00000000-0000-4000-8000-000000000000',
    message_id: 'placeholder',
    answer: `answer of ${id}`,
  }),
  conversation: { messageField: 'content' },
  adapter: agentAdapter,
  seeded: false,
};
