/** The addresses the emulator builds URLs on. One origin serves them all unless told otherwise. */
export interface Urls {
  /** `{base_url}`. */
  base(): string;
  /** `{platform_url}`: status_url, cancel_url, legacy endpoints. */
  platform(): string;
  /** `{cdn_url}`: outputs and agent media. */
  cdn(): string;
  /** `{vendor}` path segment. */
  vendor: string;
}
