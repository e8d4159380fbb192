/**
 * The emulator's built-in account: the key every `--emulator` command and test uses. Its own
 * module so that a command can name it without loading the emulator's account code (and zod).
 */
export const DEFAULT_KEY_ID = '00000000-0000-4000-8000-000000000000';
export const DEFAULT_SECRET = 'emulator-secret';
