/**
 * Wire schemas for every request and response of the Generation Service API
 * (`shared/spec/generation-service-api.md`). The typed client validates what it sends and
 * receives with these, and the emulator validates what it accepts with the same schemas,
 * so the two cannot drift apart.
 *
 * Request bodies are strict (an unknown field is refused, naming the field): a typo in a
 * manifest must not silently become a default. Response bodies are loose, so that fields
 * the service adds later do not break old clients, except where the spec forbids extras
 * (MediaOutput).
 */
import * as z from 'zod';

// ---------------------------------------------------------------------------------------------
// Shared pieces (§2.1)

/** §2.1: request status values. `canceled` is final too, unlike in the official JS client. */
export const REQUEST_STATUSES = ['queued', 'in_progress', 'nsfw', 'failed', 'completed', 'canceled'] as const;
export type RequestStatusValue = (typeof REQUEST_STATUSES)[number];
export const FINAL_REQUEST_STATUSES: ReadonlySet<RequestStatusValue> = new Set(['completed', 'failed', 'nsfw', 'canceled']);
/** §3.1: the final statuses that trigger a webhook. */
export const WEBHOOK_STATUSES = ['completed', 'failed', 'nsfw'] as const;

export const isFinalStatus = (status: RequestStatusValue): boolean => FINAL_REQUEST_STATUSES.has(status);

/** §2.1 MediaOutput: object, no additional properties, `url` required. */
export const MediaOutput = z.strictObject({ url: z.url() });
export type MediaOutput = z.infer<typeof MediaOutput>;

/** §2.1 ErrorResponse. */
export const ErrorResponse = z.looseObject({ detail: z.string() });
export type ErrorResponse = z.infer<typeof ErrorResponse>;

/** §2.1 RequestStatus. */
export const RequestStatus = z.looseObject({
  status: z.enum(REQUEST_STATUSES),
  request_id: z.guid(),
  status_url: z.url().optional(),
  cancel_url: z.url().optional(),
  error: z.string().nullable().optional(),
  images: z.array(MediaOutput).optional(),
  video: MediaOutput.optional(),
  audio: MediaOutput.optional(),
  audios: z.array(MediaOutput).optional(),
});
export type RequestStatus = z.infer<typeof RequestStatus>;

/** Response of a submit (§4.2; §4.4 and §4.8 only promise the request id). */
export const SubmitResponse = z.looseObject({
  request_id: z.guid(),
  status: z.enum(REQUEST_STATUSES).optional(),
  status_url: z.url().optional(),
  cancel_url: z.url().optional(),
});
export type SubmitResponse = z.infer<typeof SubmitResponse>;

// ---------------------------------------------------------------------------------------------
// Character sheet (§4.2, §8)

export const HUMAN_TIERS = ['normal', 'freak', 'total'] as const;
export const ANIMAL_TIERS = ['insects', 'frogs', 'cats', 'dogs', 'capybaras', 'birds'] as const;
export const TIERS = [...HUMAN_TIERS, ...ANIMAL_TIERS] as const;
export type Tier = (typeof TIERS)[number];
export const isHumanTier = (tier: Tier): boolean => (HUMAN_TIERS as readonly string[]).includes(tier);

/** Unicode code points in `s`: what the spec's "characters" count (`length` counts UTF-16 units, so an emoji counts twice). */
export function characterCount(s: string): number {
  let n = 0;
  for (const _ of s) n++;
  return n;
}

/** A string of at most `max` characters, counted as code points (a string no longer than `max` UTF-16 units passes at once). */
const atMostCharacters = (max: number) =>
  z.string().refine((s) => s.length <= max || characterCount(s) <= max, { message: `Too long: at most ${max} characters` });

export const SEED_MIN = 1;
export const SEED_MAX = 1_000_000;
export const VARIATION_INDEX_MAX = 2_147_483_647;
export const BRIEF_MAX = 4_000;
export const ITEM_IMAGE_URLS_MAX = 3;
export const SELECTION_CATEGORIES_MAX = 18;
export const CHARACTER_SHEET_PRICE_USD = 0.05;

const GENERAL_VARIANTS = ['original', 'v1', 'v2', 'v3', 'v4', 'v5'] as const;
const CENTAUR_VARIANTS = ['original', ...Array.from({ length: 10 }, (_, i) => `v${i + 1}`)] as const;
/** §4.2 trait_variants: the trait that permits v1 to v10 instead of v1 to v5. */
export const EXTENDED_VARIANT_TRAIT = 'pr_centaur';

export const TraitVariants = z.strictObject({
  version: z.literal('appearance-v2'),
  choices: z.record(z.string(), z.string()).optional(),
  animal_choices: z.record(z.string(), z.int().min(0).max(4)).nullable().optional(),
});
export type TraitVariants = z.infer<typeof TraitVariants>;

const httpUrl = z.url({ protocol: /^https?$/ });

/** §4.2 body. Every field is optional; defaults are applied by the service (and by our builder). */
export const CharacterSheetRequest = z
  .strictObject({
    tier: z.enum(TIERS).optional(),
    selection: z.record(z.string(), z.array(z.string())).optional(),
    image_url: httpUrl.nullable().optional(),
    item_image_urls: z.array(httpUrl).max(ITEM_IMAGE_URLS_MAX).optional(),
    brief: atMostCharacters(BRIEF_MAX).optional(),
    seed: z.int().min(SEED_MIN).max(SEED_MAX).nullable().optional(),
    variation_index: z.int().min(0).max(VARIATION_INDEX_MAX).optional(),
    body_color: z
      .string()
      .regex(/^#[0-9A-Fa-f]{6}$/, 'must have the format #RRGGBB')
      .nullable()
      .optional(),
    pinned_species: z.string().min(1).max(64).nullable().optional(),
    trait_variants: TraitVariants.nullable().optional(),
  })
  .superRefine((body, ctx) => {
    const tier: Tier = body.tier ?? 'normal';
    const human = isHumanTier(tier);
    if (body.selection && Object.keys(body.selection).length > SELECTION_CATEGORIES_MAX) {
      ctx.addIssue({ code: 'custom', path: ['selection'], message: `at most ${SELECTION_CATEGORIES_MAX} categories may be selected` });
    }
    if (human && body.variation_index !== undefined && body.variation_index !== 0) {
      ctx.addIssue({ code: 'custom', path: ['variation_index'], message: `human tier ${tier} requires variation_index 0` });
    }
    if (human && body.body_color != null) {
      ctx.addIssue({
        code: 'custom',
        path: ['body_color'],
        message: `body_color is for animal tiers only; human tier ${tier} requires it omitted or null`,
      });
    }
    if (body.pinned_species != null && tier !== 'insects') {
      ctx.addIssue({ code: 'custom', path: ['pinned_species'], message: `pinned_species is only allowed with tier insects, not ${tier}` });
    }
    const variants = body.trait_variants;
    if (variants) {
      for (const [trait, variant] of Object.entries(variants.choices ?? {})) {
        const allowed: readonly string[] = trait === EXTENDED_VARIANT_TRAIT ? CENTAUR_VARIANTS : GENERAL_VARIANTS;
        if (!allowed.includes(variant)) {
          ctx.addIssue({
            code: 'custom',
            path: ['trait_variants', 'choices', trait],
            message: `variant ${JSON.stringify(variant)} is not one of ${allowed.join(', ')}`,
          });
        }
      }
      if (human && variants.animal_choices != null) {
        ctx.addIssue({
          code: 'custom',
          path: ['trait_variants', 'animal_choices'],
          message: `animal_choices must be omitted or null for human tier ${tier}`,
        });
      }
    }
  });
export type CharacterSheetRequest = z.infer<typeof CharacterSheetRequest>;

// ---------------------------------------------------------------------------------------------
// Character-sheet options catalog (§2.5, §4.3)

export const CatalogOption = z.looseObject({
  key: z.string(),
  label: z.string(),
  img: z.string().nullable(),
  color: z.string().nullable(),
  tiers: z.array(z.string()).nullable(),
  slot: z.string().nullable(),
  exclusive: z.boolean(),
});
export type CatalogOption = z.infer<typeof CatalogOption>;

export const CatalogCategory = z.looseObject({
  key: z.string(),
  label: z.string(),
  tiers: z.array(z.string()),
  max: z.int().min(0),
  options: z.array(CatalogOption),
});
export type CatalogCategory = z.infer<typeof CatalogCategory>;

export const OptionsCatalog = z.looseObject({
  config_revision: z.union([z.string(), z.number()]),
  categories: z.array(CatalogCategory),
});
export type OptionsCatalog = z.infer<typeof OptionsCatalog>;

// ---------------------------------------------------------------------------------------------
// Marketing image (§4.4) and preset catalog (§2.6, §4.5)

export const RESOLUTIONS = ['1k', '2k', '4k'] as const;
export const ASPECT_RATIOS = ['auto', '1:1', '3:2', '2:3', '4:3', '3:4', '16:9', '9:16', '21:9'] as const;
export const QUALITIES = ['low', 'medium', 'high', 'xhigh', 'max'] as const;
export const MARKETING_IMAGE_URLS_MAX = 16;
/** Enhanced mode: one product image, plus an optional model reference (§4.4 modes, rule 2). */
export const ENHANCED_IMAGE_URLS_MAX = 2;

export const MarketingImageRequest = z
  .strictObject({
    prompt: z.string().optional(),
    image_urls: z.array(httpUrl).max(MARKETING_IMAGE_URLS_MAX).optional(),
    preset_id: z.uuid().optional(),
    resolution: z.enum(RESOLUTIONS).optional(),
    aspect_ratio: z.enum(ASPECT_RATIOS).optional(),
    quality: z.enum(QUALITIES).optional(),
    enhance_prompt: z.boolean().optional(),
  })
  .superRefine((body, ctx) => {
    if (body.enhance_prompt !== true) return;
    if (body.preset_id === undefined) {
      ctx.addIssue({ code: 'custom', path: ['preset_id'], message: 'preset_id is required when enhance_prompt is true' });
    }
    const images = body.image_urls?.length ?? 0;
    if (images < 1) {
      ctx.addIssue({ code: 'custom', path: ['image_urls'], message: 'enhanced mode requires one product image in image_urls' });
    } else if (images > ENHANCED_IMAGE_URLS_MAX) {
      ctx.addIssue({
        code: 'custom',
        path: ['image_urls'],
        message: 'enhanced mode takes one product image and at most one model reference',
      });
    }
  });
export type MarketingImageRequest = z.infer<typeof MarketingImageRequest>;

export const Preset = z.looseObject({ id: z.guid(), type: z.literal('ads'), name: z.string() });
export type Preset = z.infer<typeof Preset>;

export const PresetPage = z.looseObject({
  total: z.int().min(0),
  cursor: z.string().nullable(),
  items: z.array(Preset),
});
export type PresetPage = z.infer<typeof PresetPage>;

// ---------------------------------------------------------------------------------------------
// Agent API (§2.2–2.4, §3.2, §4.6)

export const SESSION_STATUSES = ['idle', 'processing', 'awaiting_input'] as const;
export type SessionStatus = (typeof SESSION_STATUSES)[number];
export const MESSAGE_STATUSES = ['processing', 'completed', 'failed'] as const;
export type MessageStatus = (typeof MESSAGE_STATUSES)[number];
export const AGENT_CONTENT_MAX = 20_000;
export const MEDIA_TYPES = ['image', 'video', 'audio', 'file'] as const;
export type MediaType = (typeof MEDIA_TYPES)[number];

export const CreateSessionRequest = z.strictObject({ config: z.record(z.string(), z.unknown()).optional() });
export type CreateSessionRequest = z.infer<typeof CreateSessionRequest>;

export const SessionResponse = z.looseObject({ session_id: z.guid(), status: z.enum(SESSION_STATUSES) });
export type SessionResponse = z.infer<typeof SessionResponse>;

export const SendMessageRequest = z.strictObject({ content: atMostCharacters(AGENT_CONTENT_MAX).min(1) });
export type SendMessageRequest = z.infer<typeof SendMessageRequest>;

export const SendMessageResponse = z.looseObject({ message_id: z.string(), status: z.literal('processing') });
export type SendMessageResponse = z.infer<typeof SendMessageResponse>;

export const AssistantPart = z.looseObject({ type: z.string(), text: z.string().optional() });
export type AssistantPart = z.infer<typeof AssistantPart>;

export const UserMessageBody = z.looseObject({ type: z.literal('text'), text: z.string() });
export const AssistantMessageBody = z.looseObject({ id: z.string(), role: z.literal('assistant'), parts: z.array(AssistantPart) });

export const AgentMessage = z.looseObject({
  message_id: z.string(),
  role: z.enum(['user', 'assistant']),
  status: z.enum(MESSAGE_STATUSES),
  message: z.union([UserMessageBody, AssistantMessageBody]),
  created_at: z.iso.datetime({ precision: 3 }),
  llm_cost_usd: z.number().optional(),
});
export type AgentMessage = z.infer<typeof AgentMessage>;

export const MessagesResponse = z.looseObject({ status: z.enum(SESSION_STATUSES), messages: z.array(AgentMessage) });
export type MessagesResponse = z.infer<typeof MessagesResponse>;

export const InterruptResponse = SessionResponse;
export type InterruptResponse = SessionResponse;

export const MediaCreateRequest = z.strictObject({
  extension: z.string().regex(/^[A-Za-z0-9]{1,10}$/, 'must be a file extension such as png, without the dot'),
  type: z.enum(MEDIA_TYPES),
});
export type MediaCreateRequest = z.infer<typeof MediaCreateRequest>;

export const MediaRecord = z.looseObject({
  id: z.string(),
  type: z.enum(MEDIA_TYPES),
  content_type: z.string(),
  upload_url: z.url(),
  url: z.url(),
});
export type MediaRecord = z.infer<typeof MediaRecord>;

export const MediaConfirmRequest = z.strictObject({ type: z.enum(MEDIA_TYPES) });
export type MediaConfirmRequest = z.infer<typeof MediaConfirmRequest>;

export const MediaConfirmResponse = z.looseObject({ status: z.enum(['uploaded', 'not_ready']) });
export type MediaConfirmResponse = z.infer<typeof MediaConfirmResponse>;

// ---------------------------------------------------------------------------------------------
// Legacy platform (§2.7, §4.7)

/** §2.7 webhook object: nullable body member of DoP and Soul. */
export const LegacyWebhook = z.strictObject({ url: httpUrl, secret: z.string() });
export type LegacyWebhook = z.infer<typeof LegacyWebhook>;

const InputImage = z.strictObject({ type: z.string(), image_url: z.string() });
const InputAudio = z.strictObject({ type: z.string(), audio_url: z.string() });

// §4.7: "Allowed values, bounds and required flags of individual params members ... not shown",
// so every member is optional and only its type is checked.
export const DopParams = z.strictObject({
  model: z.string().optional(),
  prompt: z.string().optional(),
  seed: z.int().optional(),
  motions: z.array(z.strictObject({ id: z.uuid(), strength: z.number() })).optional(),
  input_images: z.array(InputImage).optional(),
  input_images_end: z.array(InputImage).optional(),
  enhance_prompt: z.boolean().optional(),
});
export type DopParams = z.infer<typeof DopParams>;

export const SoulParams = z.strictObject({
  prompt: z.string().optional(),
  width_and_height: z.string().optional(),
  enhance_prompt: z.boolean().optional(),
  style_id: z.uuid().optional(),
  style_strength: z.number().optional(),
  quality: z.string().optional(),
  seed: z.int().optional(),
  custom_reference_id: z.uuid().optional(),
  custom_reference_strength: z.number().optional(),
  image_reference: InputImage.optional(),
  batch_size: z.int().optional(),
});
export type SoulParams = z.infer<typeof SoulParams>;

export const SpeakParams = z.strictObject({
  input_image: InputImage.optional(),
  input_audio: InputAudio.optional(),
  prompt: z.string().optional(),
  quality: z.string().optional(),
  enhance_prompt: z.boolean().optional(),
  seed: z.int().optional(),
  duration: z.number().optional(),
});
export type SpeakParams = z.infer<typeof SpeakParams>;

export const DopRequest = z.strictObject({ webhook: LegacyWebhook.nullable().optional(), params: DopParams });
export type DopRequest = z.infer<typeof DopRequest>;
export const SoulRequest = z.strictObject({ webhook: LegacyWebhook.nullable().optional(), params: SoulParams });
export type SoulRequest = z.infer<typeof SoulRequest>;
/** §4.7: Speak takes `params` only. */
export const SpeakRequest = z.strictObject({ params: SpeakParams });
export type SpeakRequest = z.infer<typeof SpeakRequest>;

export const JOB_SET_TYPES = ['text2image_soul', 'image2video'] as const;
export type JobSetType = (typeof JOB_SET_TYPES)[number];

export const JobResult = z.looseObject({ type: z.string(), url: z.string() });
export const Job = z.looseObject({
  id: z.guid(),
  job_set_type: z.string(),
  status: z.string(),
  results: z.looseObject({ min: JobResult, raw: JobResult }).nullable().optional(),
});
export type Job = z.infer<typeof Job>;

export const JobSet = z.looseObject({
  id: z.guid(),
  // §2.7 lists text2image_soul and image2video, and shows no type for Speak: a set already paid for
  // must not become unreadable over a type name, so any string is accepted here.
  type: z.string(),
  created_at: z.iso.datetime({ offset: true }),
  jobs: z.array(Job),
  input_params: z.record(z.string(), z.unknown()),
});
export type JobSet = z.infer<typeof JobSet>;

/** Job statuses that end a job. The spec shows only `queued`; these mirror the request statuses. */
export const FINAL_JOB_STATUSES: ReadonlySet<string> = new Set(['completed', 'failed', 'nsfw', 'canceled']);

// ---------------------------------------------------------------------------------------------
// Webhook-enabled model path (§4.8) and webhook payloads (§6)

export const SoulStandardRequest = z.strictObject({
  prompt: z.string(),
  aspect_ratio: z.string(),
  resolution: z.string(),
});
export type SoulStandardRequest = z.infer<typeof SoulStandardRequest>;

export const WebhookPayload = z.discriminatedUnion('status', [
  z.looseObject({
    status: z.literal('completed'),
    request_id: z.guid(),
    status_url: z.url().optional(),
    cancel_url: z.url().optional(),
    images: z.array(MediaOutput).optional(),
    video: MediaOutput.optional(),
  }),
  z.looseObject({ status: z.literal('failed'), request_id: z.guid(), error: z.string() }),
  z.looseObject({ status: z.literal('nsfw'), request_id: z.guid() }),
]);
export type WebhookPayload = z.infer<typeof WebhookPayload>;
